// TestMW's program: memory windows through softrdma's libibverbs.so.1 as
// programs use them, through the header's inline functions: a type 1
// window bound with ibv_bind_mw, a type 2 window bound by a BIND_MW work
// request, RDMA WRITEs through their keys, LOCAL_INV, and the write a
// revoked key is refused. Two RC QPs on one device, a writing into memory
// that b's windows give. It prints what failed and exits 1, or "mw: ok".
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static int failed;

#define CHECK(cond, ...)                                                                       \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                 \
			printf(__VA_ARGS__);                                                   \
			printf(" (errno %d %s)\n", errno, strerror(errno));                   \
			failed = 1;                                                            \
		}                                                                              \
	} while (0)
#define MUST(cond, ...)                                                                        \
	do {                                                                                   \
		CHECK(cond, __VA_ARGS__);                                                      \
		if (failed)                                                                    \
			exit(1);                                                               \
	} while (0)

static struct ibv_wc poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 50000000; i++)
		if (ibv_poll_cq(cq, 1, &wc) == 1)
			return wc;
	MUST(0, "no completion");
	return wc;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0, "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC) == 0, "RTS");
}

static char buf[4096];

// write posts an RDMA WRITE of 8 bytes from a into addr with rkey and
// returns its completion's status.
static enum ibv_wc_status write(struct ibv_qp *a, struct ibv_cq *cq, struct ibv_mr *mr, void *addr, uint32_t rkey,
				const char *what)
{
	memcpy(buf, what, 8);
	struct ibv_sge s = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr w = {.wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				.send_flags = IBV_SEND_SIGNALED},
			   *bad;
	w.wr.rdma.remote_addr = (uintptr_t)addr;
	w.wr.rdma.rkey = rkey;
	MUST(ibv_post_send(a, &w, &bad) == 0, "post RDMA WRITE");
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.wr_id == 7 && wc.opcode == IBV_WC_RDMA_WRITE, "write completion: id %llu opcode %d",
	      (unsigned long long)wc.wr_id, wc.opcode);
	return wc.status;
}

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	MUST(list && list[0], "ibv_get_device_list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx, "ibv_open_device");
	ibv_free_device_list(list);
	struct ibv_device_attr da;
	MUST(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
	CHECK((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) &&
		      da.max_mw > 0,
	      "memory window capabilities");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd, "ibv_alloc_pd");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	MUST(mr, "ibv_reg_mr");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	MUST(cq, "ibv_create_cq");
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
				      .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
	MUST(a && b, "ibv_create_qp");
	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0, "GID");
	to_rts(a, b->qp_num, &gid);
	to_rts(b, a->qp_num, &gid);

	errno = 0;
	CHECK(ibv_alloc_mw(pd, 3) == NULL && errno == EINVAL, "a window of type 3");

	// Type 1: ibv_bind_mw on b, then a writes through the window's key.
	struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	MUST(w1 && w1->type == IBV_MW_TYPE_1 && w1->pd == pd && w1->context == ctx, "ibv_alloc_mw type 1");
	uint32_t old = w1->rkey;
	struct ibv_mw_bind mb = {.wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
				 .bind_info = {.mr = mr, .addr = (uintptr_t)buf + 256, .length = 64,
					       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	CHECK(ibv_bind_mw(b, w1, &mb) == 0, "ibv_bind_mw");
	CHECK(w1->rkey != old && (w1->rkey & ~0xffu) == (old & ~0xffu), "bound key %x after %x", w1->rkey, old);
	struct ibv_wc wc = poll_one(cq);
	CHECK(wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "bind completion: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(write(a, cq, mr, buf + 256, w1->rkey, "window1") == IBV_WC_SUCCESS, "write through type 1");
	CHECK(memcmp(buf + 256, "window1", 8) == 0, "written through type 1");

	// Type 2: a BIND_MW work request on b, a write through it, LOCAL_INV.
	struct ibv_mw *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	MUST(w2 && w2->type == IBV_MW_TYPE_2, "ibv_alloc_mw type 2");
	uint32_t key2 = ibv_inc_rkey(w2->rkey);
	struct ibv_send_wr bw = {.wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *bad;
	bw.bind_mw.mw = w2;
	bw.bind_mw.rkey = key2;
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)buf + 512, .length = 64,
							 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	CHECK(ibv_post_send(b, &bw, &bad) == 0, "post BIND_MW");
	wc = poll_one(cq);
	CHECK(wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "BIND_MW completion: %s",
	      ibv_wc_status_str(wc.status));
	CHECK(write(a, cq, mr, buf + 512, key2, "window2") == IBV_WC_SUCCESS, "write through type 2");
	CHECK(memcmp(buf + 512, "window2", 8) == 0, "written through type 2");
	struct ibv_send_wr inv = {.wr_id = 3, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED,
				  .invalidate_rkey = key2};
	CHECK(ibv_post_send(b, &inv, &bad) == 0, "post LOCAL_INV");
	wc = poll_one(cq);
	CHECK(wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV, "LOCAL_INV completion: %s",
	      ibv_wc_status_str(wc.status));
	// The invalidated key no longer gives access (a's QP goes to error).
	CHECK(write(a, cq, mr, buf + 512, key2, "revoked") == IBV_WC_REM_ACCESS_ERR, "write through a revoked key");
	CHECK(memcmp(buf + 512, "window2", 8) == 0, "nothing written through a revoked key");

	CHECK(ibv_dealloc_mw(w1) == 0 && ibv_dealloc_mw(w2) == 0, "ibv_dealloc_mw");
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	if (failed)
		return 1;
	printf("mw: ok\n");
	return 0;
}
