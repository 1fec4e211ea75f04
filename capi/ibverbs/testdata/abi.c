// TestABI's program: a C program linked against softrdma's
// libibverbs.so.1 that uses it as programs do, through the header's
// inline functions (ibv_post_send, ibv_poll_cq, ibv_query_port, ...): one
// device from SOFTRDMA_DEVICES, two RC QPs connected to each other on it,
// a SEND with inline data, an RDMA WRITE, a completion event on a
// channel's fd through poll(2), a bad work request, and the errno of what
// is not supported. It prints what failed and exits 1, or "abi: ok".
#include <poll.h>
#include <arpa/inet.h>
#include "common.h"

// RC_ACCESS is what the connected QPs let each other do.
#define RC_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE)

int main(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	MUST(list && n == 1, "ibv_get_device_list: %d devices", n);
	CHECK(strcmp(ibv_get_device_name(list[0]), "softrdma0") == 0, "name %s", ibv_get_device_name(list[0]));
	CHECK(ibv_get_device_guid(list[0]) != 0, "GUID");
	errno = 0;
	CHECK(ibv_open_device(NULL) == NULL && errno == EINVAL, "ibv_open_device(NULL)");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx, "ibv_open_device");
	ibv_free_device_list(list);

	// What the header's inline functions read.
	CHECK(verbs_get_ctx(ctx) != NULL, "verbs_get_ctx: not an extended context");
	CHECK(ctx->ops.post_send && ctx->ops.post_recv && ctx->ops.poll_cq && ctx->ops.req_notify_cq &&
		      ctx->ops.post_srq_recv, "ops table");
	struct ibv_device_attr_ex dx;
	CHECK(ibv_query_device_ex(ctx, NULL, &dx) == 0, "ibv_query_device_ex");
	CHECK(dx.orig_attr.phys_port_cnt == 1 && dx.completion_timestamp_mask != 0 && dx.orig_attr.max_qp > 0,
	      "device_ex attributes: ports %d mask %llx", dx.orig_attr.phys_port_cnt,
	      (unsigned long long)dx.completion_timestamp_mask);
	struct ibv_port_attr pa;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.gid_tbl_len == 1,
	      "port: state %d link layer %d gids %d", pa.state, pa.link_layer, pa.gid_tbl_len);
	CHECK(ibv_query_port(ctx, 2, &pa) == EINVAL, "port 2");
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	CHECK(gid.raw[10] == 0xff && gid.raw[11] == 0xff && gid.raw[12] == 127 && gid.raw[15] == 1, "GID 0");
	errno = 0;
	CHECK(ibv_query_gid(ctx, 1, 1, &gid) == -1 && errno == EINVAL, "GID 1 of a table of 1");
	__be16 pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == htons(0xffff), "pkey 0: %x", ntohs(pkey));

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd, "ibv_alloc_pd");
	static char buf[2][4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST(mr && mr->addr == buf && mr->length == sizeof(buf) && mr->lkey, "ibv_reg_mr");
	errno = 0;
	CHECK(ibv_reg_mr_iova2(pd, buf, 64, 4096, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EOPNOTSUPP,
	      "ibv_reg_mr_iova2 with an IOVA of its own");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	MUST(ch && ch->fd >= 0, "ibv_create_comp_channel");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
	MUST(cq && cq->cqe >= 16 && cq->channel == ch, "ibv_create_cq");
	CHECK(ibv_destroy_comp_channel(ch) == EBUSY, "destroying a channel in use");
	CHECK(ibv_resize_cq(cq, 32) == 0 && cq->cqe >= 32, "ibv_resize_cq: %d", cq->cqe);
	CHECK(ibv_resize_cq(cq, 0) == EINVAL && cq->cqe >= 32, "ibv_resize_cq to 0");

	// Not supported: the errno libibverbs gives for a provider without it.
	struct ibv_cq_init_attr_ex cqx = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_FLOW_TAG};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &cqx) == NULL && errno == EOPNOTSUPP, "ibv_create_cq_ex with flow tags");
	errno = 0;
	CHECK(ibv_alloc_mw(pd, (enum ibv_mw_type)3) == NULL && errno == EINVAL, "ibv_alloc_mw of no type");
	struct ibv_qp_init_attr xa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_XRC_SEND,
				      .cap = {.max_send_wr = 1, .max_send_sge = 1}};
	errno = 0;
	CHECK(ibv_create_qp(pd, &xa) == NULL && errno == EOPNOTSUPP, "XRC QP");

	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 2, .max_recv_sge = 2,
					      .max_inline_data = 64}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia);
	struct ibv_qp *b = ibv_create_qp(pd, &ia);
	MUST(a && b && a->qp_num && a->qp_num != b->qp_num && ia.cap.max_inline_data >= 64, "ibv_create_qp");
	CHECK(a->state == IBV_QPS_RESET && a->context == ctx && a->pd == pd, "QP fields");
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "GID");
	to_rts(a, b->qp_num, &gid, RC_ACCESS, 1, 7);
	to_rts(b, a->qp_num, &gid, RC_ACCESS, 1, 7);
	CHECK(a->state == IBV_QPS_RTS, "state after modify: %d", a->state);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	CHECK(ibv_query_qp(a, &qa, IBV_QP_STATE | IBV_QP_CAP, &qia) == 0 && qa.qp_state == IBV_QPS_RTS &&
		      qa.dest_qp_num == b->qp_num && qia.cap.max_send_wr >= 8,
	      "ibv_query_qp");

	// A receive on b, a SEND with inline data from a.
	struct ibv_sge rs = {.addr = (uintptr_t)buf[1], .length = 4096, .lkey = mr->lkey};
	struct ibv_recv_wr rwr = {.wr_id = 11, .sg_list = &rs, .num_sge = 1}, *rbad;
	CHECK(ibv_post_recv(b, &rwr, &rbad) == 0, "ibv_post_recv");
	CHECK(ibv_req_notify_cq(cq, 0) == 0, "ibv_req_notify_cq");
	char msg[] = "hello from C";
	struct ibv_sge ss = {.addr = (uintptr_t)msg, .length = sizeof(msg)};
	struct ibv_send_wr swr = {.wr_id = 22, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED, .imm_data = htonl(0xdeadbeef)},
			   *sbad;
	CHECK(ibv_post_send(a, &swr, &sbad) == 0, "ibv_post_send");
	struct pollfd pfd = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pfd, 1, 10000) == 1 && (pfd.revents & POLLIN), "poll(2) on the channel's fd");
	struct ibv_cq *ecq;
	void *ectx;
	CHECK(ibv_get_cq_event(ch, &ecq, &ectx) == 0 && ecq == cq && ectx == (void *)0x1234, "ibv_get_cq_event");
	ibv_ack_cq_events(cq, 1);
	CHECK(cq->comp_events_completed == 1, "acked events");
	int got_send = 0, got_recv = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc;
		MUST(poll_one(cq, &wc) == 1, "completion %d", i);
		CHECK(wc.status == IBV_WC_SUCCESS, "status %s", ibv_wc_status_str(wc.status));
		if (wc.wr_id == 22) {
			got_send = 1;
			CHECK(wc.opcode == IBV_WC_SEND && wc.qp_num == a->qp_num, "send completion");
		} else {
			got_recv = 1;
			CHECK(wc.wr_id == 11 && wc.opcode == IBV_WC_RECV && wc.byte_len == sizeof(msg) &&
				      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xdeadbeef &&
				      wc.qp_num == b->qp_num && wc.src_qp == a->qp_num,
			      "receive completion: id %llu opcode %d len %u imm %x", (unsigned long long)wc.wr_id,
			      wc.opcode, wc.byte_len, ntohl(wc.imm_data));
			CHECK(memcmp(buf[1], msg, sizeof(msg)) == 0, "received data");
		}
	}
	CHECK(got_send && got_recv, "both completions");

	// An RDMA WRITE of two SGEs from buf[0] into b's buf[1], then a chain
	// whose second request is bad: the first is posted, bad_wr is the second.
	memcpy(buf[0], "0123456789", 10);
	struct ibv_sge two[2] = {{.addr = (uintptr_t)buf[0], .length = 5, .lkey = mr->lkey},
				 {.addr = (uintptr_t)buf[0] + 5, .length = 5, .lkey = mr->lkey}};
	struct ibv_send_wr w2 = {.wr_id = 33, .sg_list = two, .num_sge = 2, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	w2.wr.rdma.remote_addr = (uintptr_t)buf[1] + 100;
	w2.wr.rdma.rkey = mr->rkey;
	struct ibv_send_wr w3 = w2;
	w3.wr_id = 44;
	w3.num_sge = -1;
	w2.next = &w3;
	CHECK(ibv_post_send(a, &w2, &sbad) == EINVAL && sbad == &w3, "a bad second request");
	struct ibv_wc wc;
	MUST(poll_one(cq, &wc) == 1, "RDMA WRITE completion");
	CHECK(wc.wr_id == 33 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "RDMA WRITE: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(memcmp(buf[1] + 100, "0123456789", 10) == 0, "written data");
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "nothing more");

	// Posting and polling allocate nothing per call: 2000 SENDs with their
	// receives cost the Go side (engine included) fewer than 100 objects.
	uint64_t softrdma_go_allocs(void);
	for (int round = 0; round < 2; round++) { // the first grows the scratch
		uint64_t before = softrdma_go_allocs();
		int iters = round ? 2000 : 50;
		for (int i = 0; i < iters; i++) {
			struct ibv_sge r1 = {.addr = (uintptr_t)buf[1], .length = 64, .lkey = mr->lkey};
			struct ibv_recv_wr rw = {.wr_id = 1000 + i, .sg_list = &r1, .num_sge = 1};
			struct ibv_sge s1 = {.addr = (uintptr_t)buf[0], .length = 64, .lkey = mr->lkey};
			struct ibv_send_wr sw = {.wr_id = 5000 + i, .sg_list = &s1, .num_sge = 1, .opcode = IBV_WR_SEND,
						 .send_flags = IBV_SEND_SIGNALED};
			MUST(ibv_post_recv(b, &rw, &rbad) == 0 && ibv_post_send(a, &sw, &sbad) == 0, "post %d", i);
			for (int got = 0; got < 2;) {
				struct ibv_wc w[2];
				int n = ibv_poll_cq(cq, 2, w);
				MUST(n >= 0, "poll");
				for (int k = 0; k < n; k++)
					MUST(w[k].status == IBV_WC_SUCCESS, "completion %d: %s", i, ibv_wc_status_str(w[k].status));
				got += n;
			}
		}
		uint64_t allocs = softrdma_go_allocs() - before;
		if (round)
			CHECK(allocs < 100, "%llu Go allocations in %d exchanges", (unsigned long long)allocs, iters);
		if (round && getenv("SOFTRDMA_ABI_VERBOSE"))
			printf("allocations: %llu in %d exchanges\n", (unsigned long long)allocs, iters);
	}

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	if (failed)
		return 1;
	printf("abi: ok\n");
	return 0;
}
