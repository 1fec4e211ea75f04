// TestExtendedVerbs' program: the _ex calls as programs use them, through
// the inline functions of <infiniband/verbs.h>. Two RC QPs on one device
// made by ibv_create_qp_ex with send ops, connected to each other, post
// through the ibv_wr_* API (a SEND of an inline data list, an RDMA WRITE
// with immediate of an SGE list, an RDMA READ, both atomics, several work
// requests in one wr_start/wr_complete); completions come from
// ibv_create_cq_ex CQs through ibv_start_poll/ibv_next_poll/ibv_end_poll
// and the ibv_wc_read_* functions, with completion timestamps. It checks
// the data moved, wr_abort, and the errno of what is not supported, and
// prints what failed and exits 1, or "ex: ok".
#include <arpa/inet.h>
#include "common.h"

// RC_ACCESS is what the connected QPs let each other do.
#define RC_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE)

// struct done is one completion as the read functions give it.
struct done {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, imm;
	unsigned int flags;
	uint64_t ts;
};

// poll_n takes n completions from cq through the poll API, bounded.
static int poll_n(struct ibv_cq_ex *cq, struct done *d, int n)
{
	int got = 0;
	for (long spin = 0; got < n && spin < 20000000; spin++) {
		struct ibv_poll_cq_attr attr = {0};
		int ret = ibv_start_poll(cq, &attr);
		if (ret == ENOENT)
			continue;
		CHECK(ret == 0, "ibv_start_poll = %d", ret);
		if (ret)
			return got;
		do {
			d[got].wr_id = cq->wr_id;
			d[got].status = cq->status;
			d[got].opcode = ibv_wc_read_opcode(cq);
			d[got].byte_len = ibv_wc_read_byte_len(cq);
			d[got].qp_num = ibv_wc_read_qp_num(cq);
			d[got].flags = ibv_wc_read_wc_flags(cq);
			d[got].imm = d[got].flags & IBV_WC_WITH_IMM ? ntohl(ibv_wc_read_imm_data(cq)) : 0;
			d[got].ts = ibv_wc_read_completion_ts(cq);
			got++;
		} while (got < n && (ret = ibv_next_poll(cq)) == 0);
		CHECK(ret == 0 || ret == ENOENT, "ibv_next_poll = %d", ret);
		ibv_end_poll(cq);
	}
	return got;
}

int main(void)
{
	struct ibv_context *ctx = open_device();

	struct ibv_device_attr_ex dx;
	MUST(ibv_query_device_ex(ctx, NULL, &dx) == 0, "ibv_query_device_ex");
	CHECK(dx.completion_timestamp_mask != 0 && dx.hca_core_clock != 0, "completion timestamps: mask %llx clock %llu",
	      (unsigned long long)dx.completion_timestamp_mask, (unsigned long long)dx.hca_core_clock);
	CHECK(dx.orig_attr.max_qp > 0 && dx.orig_attr.phys_port_cnt == 1, "the basic attributes");

	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd, "ibv_alloc_pd");
	static uint64_t mem[2][512];
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, sizeof(mem),
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC);
	MUST(mr, "ibv_reg_mr");
	char *a_buf = (char *)mem[0], *b_buf = (char *)mem[1];

	// Unsupported: the errno libibverbs' providers give.
	struct ibv_cq_init_attr_ex bad = {.cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN};
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &bad) == NULL && errno == EOPNOTSUPP, "a CQ with CVLANs");

	struct ibv_cq_init_attr_ex cqa = {.cqe = 32, .wc_flags = IBV_WC_STANDARD_FLAGS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP};
	struct ibv_cq_ex *scq = ibv_create_cq_ex(ctx, &cqa);
	struct ibv_cq_ex *rcq = ibv_create_cq_ex(ctx, &cqa);
	MUST(scq && rcq && scq->cqe >= 32, "ibv_create_cq_ex");
	struct ibv_poll_cq_attr pa = {0};
	CHECK(ibv_start_poll(scq, &pa) == ENOENT, "ibv_start_poll on an empty CQ");

	struct ibv_qp_init_attr_ex qa = {
		.send_cq = ibv_cq_ex_to_cq(scq), .recv_cq = ibv_cq_ex_to_cq(rcq), .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 4, .max_recv_sge = 4, .max_inline_data = 64},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
	};
	qa.send_ops_flags |= IBV_QP_EX_WITH_TSO;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qa) == NULL && errno == EOPNOTSUPP, "a QP with TSO");
	qa.send_ops_flags &= ~(uint64_t)IBV_QP_EX_WITH_TSO;
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa);
	struct ibv_qp *b = ibv_create_qp_ex(ctx, &qa);
	MUST(a && b, "ibv_create_qp_ex");
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	MUST(ax && &ax->qp_base == a, "ibv_qp_to_qp_ex");
	struct ibv_qp_init_attr plain = {.send_cq = ibv_cq_ex_to_cq(scq), .recv_cq = ibv_cq_ex_to_cq(scq),
					 .qp_type = IBV_QPT_RC,
					 .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *p = ibv_create_qp(pd, &plain);
	MUST(p, "ibv_create_qp");
	CHECK(ibv_qp_to_qp_ex(p) == NULL, "ibv_qp_to_qp_ex of a QP made without send ops");
	ibv_destroy_qp(p);
	to_rts(a, b->qp_num, &gid, RC_ACCESS, 4, 0);
	to_rts(b, a->qp_num, &gid, RC_ACCESS, 4, 0);

	// B receives the SEND and the WRITE's immediate.
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)b_buf + 256 * i, .length = 256, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = 100 + i, .sg_list = &sge, .num_sge = 1}, *badr;
		MUST(ibv_post_recv(b, &wr, &badr) == 0, "ibv_post_recv");
	}

	// A batch that is aborted posts nothing.
	ibv_wr_start(ax);
	ax->wr_id = 99;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)a_buf, 8);
	ibv_wr_abort(ax);

	// One batch: SEND of two inline buffers, WRITE with immediate of two
	// SGEs into B's memory at 1024.
	char hello[] = "hello, ", world[] = "world";
	strcpy(a_buf + 512, "written by ");
	strcpy(a_buf + 600, "ibv_wr_rdma_write_imm");
	ibv_wr_start(ax);
	ax->wr_id = 1;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(ax);
	struct ibv_data_buf bufs[] = {{hello, strlen(hello)}, {world, strlen(world) + 1}};
	ibv_wr_set_inline_data_list(ax, 2, bufs);
	memset(hello, 'X', sizeof(hello) - 1); // inline data is copied when set
	ax->wr_id = 2;
	ibv_wr_rdma_write_imm(ax, mr->rkey, (uintptr_t)b_buf + 1024, htonl(0xfeed));
	struct ibv_sge two[] = {{(uintptr_t)a_buf + 512, 11, mr->lkey}, {(uintptr_t)a_buf + 600, 22, mr->lkey}};
	ibv_wr_set_sge_list(ax, 2, two);
	MUST(ibv_wr_complete(ax) == 0, "ibv_wr_complete");

	struct done d[4];
	int got = poll_n(scq, d, 2);
	MUST(got == 2, "%d send completions, want 2", got);
	CHECK(d[0].wr_id == 1 && d[0].status == IBV_WC_SUCCESS && d[0].opcode == IBV_WC_SEND, "SEND: id %llu status %d op %d",
	      (unsigned long long)d[0].wr_id, d[0].status, d[0].opcode);
	CHECK(d[1].wr_id == 2 && d[1].status == IBV_WC_SUCCESS && d[1].opcode == IBV_WC_RDMA_WRITE,
	      "WRITE: id %llu status %d op %d", (unsigned long long)d[1].wr_id, d[1].status, d[1].opcode);
	CHECK(d[0].qp_num == a->qp_num, "qp_num %u", d[0].qp_num);
	CHECK(d[0].ts != 0 && d[1].ts >= d[0].ts, "completion timestamps %llu, %llu", (unsigned long long)d[0].ts,
	      (unsigned long long)d[1].ts);
	got = poll_n(rcq, d, 2);
	MUST(got == 2, "%d receive completions, want 2", got);
	CHECK(d[0].wr_id == 100 && d[0].opcode == IBV_WC_RECV && d[0].byte_len == 13, "receive of the SEND: id %llu op %d len %u",
	      (unsigned long long)d[0].wr_id, d[0].opcode, d[0].byte_len);
	CHECK(strcmp(b_buf, "hello, world") == 0, "B received %.16s", b_buf);
	CHECK(d[1].wr_id == 101 && d[1].opcode == IBV_WC_RECV_RDMA_WITH_IMM && (d[1].flags & IBV_WC_WITH_IMM) &&
		      d[1].imm == 0xfeed,
	      "receive of the immediate: id %llu op %d flags %x imm %x", (unsigned long long)d[1].wr_id, d[1].opcode,
	      d[1].flags, d[1].imm);
	CHECK(memcmp(b_buf + 1024, "written by ibv_wr_rdma_write_imm", 32) == 0, "B's memory: %.32s", b_buf + 1024);

	// READ, compare-and-swap, fetch-and-add in one batch.
	uint64_t *ab = (uint64_t *)(b_buf + 2048);
	ab[0] = 5;
	ab[1] = 40;
	strcpy(b_buf + 3000, "read back");
	ibv_wr_start(ax);
	ax->wr_id = 3;
	ibv_wr_rdma_read(ax, mr->rkey, (uintptr_t)b_buf + 3000);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)a_buf + 3000, 10);
	ax->wr_id = 4;
	ibv_wr_atomic_cmp_swp(ax, mr->rkey, (uintptr_t)&ab[0], 5, 7);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)a_buf + 2048, 8);
	ax->wr_id = 5;
	ibv_wr_atomic_fetch_add(ax, mr->rkey, (uintptr_t)&ab[1], 2);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)a_buf + 2056, 8);
	MUST(ibv_wr_complete(ax) == 0, "ibv_wr_complete");
	got = poll_n(scq, d, 3);
	MUST(got == 3, "%d completions, want 3", got);
	CHECK(d[0].wr_id == 3 && d[0].opcode == IBV_WC_RDMA_READ && d[0].status == IBV_WC_SUCCESS, "READ: op %d status %d",
	      d[0].opcode, d[0].status);
	CHECK(d[1].wr_id == 4 && d[1].opcode == IBV_WC_COMP_SWAP && d[2].wr_id == 5 && d[2].opcode == IBV_WC_FETCH_ADD,
	      "atomics: ops %d %d", d[1].opcode, d[2].opcode);
	CHECK(strcmp(a_buf + 3000, "read back") == 0, "READ brought %.10s", a_buf + 3000);
	uint64_t *aa = (uint64_t *)(a_buf + 2048);
	CHECK(aa[0] == 5 && ab[0] == 7, "compare-and-swap: old %llu new %llu", (unsigned long long)aa[0],
	      (unsigned long long)ab[0]);
	CHECK(aa[1] == 40 && ab[1] == 42, "fetch-and-add: old %llu new %llu", (unsigned long long)aa[1],
	      (unsigned long long)ab[1]);

	// Unsupported in a batch: wr_complete says so and posts nothing; a
	// setter with no work request started is EINVAL.
	ibv_wr_start(ax);
	ibv_wr_send(ax);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)a_buf, 8);
	ibv_wr_send_tso(ax, NULL, 0, 0);
	CHECK(ibv_wr_complete(ax) == EOPNOTSUPP, "a TSO send");
	ibv_wr_start(ax);
	ibv_wr_set_sge(ax, mr->lkey, (uintptr_t)a_buf, 8);
	CHECK(ibv_wr_complete(ax) == EINVAL, "an SGE with no work request");
	CHECK(ibv_start_poll(scq, &pa) == ENOENT, "completions of what was not posted");

	MUST(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	MUST(ibv_destroy_cq(ibv_cq_ex_to_cq(scq)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(rcq)) == 0, "ibv_destroy_cq");
	MUST(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
	if (failed)
		return 1;
	printf("ex: ok\n");
	return 0;
}
