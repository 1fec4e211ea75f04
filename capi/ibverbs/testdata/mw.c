// TestMemoryWindows' program: memory windows through the inline
// ibv_alloc_mw, ibv_bind_mw and ibv_dealloc_mw of <infiniband/verbs.h>.
// Two RC QPs on one device connected to each other: A binds a type 1
// window to 64 bytes of a region with the bind call and a type 2 window
// with a BIND_MW work request (ibv_post_send) and with ibv_wr_bind_mw;
// B writes through each window's R_Key (landing in the region), writes
// past a window's end (remote access error), and the region's own R_Key
// and a window's old R_Key stop nothing but themselves. It prints what
// failed and exits 1, or "mw: ok".
#include "common.h"

// RC_ACCESS is what the connected QPs let each other do.
#define RC_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE)

// write_via has B write 8 bytes at addr with rkey and returns the status.
static enum ibv_wc_status write_via(struct ibv_qp *b, struct ibv_cq *cq, struct ibv_mr *mr, char *src, uint64_t addr,
				    uint32_t rkey)
{
	struct ibv_sge sge = {.addr = (uintptr_t)src, .length = 8, .lkey = mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	wr.wr.rdma.remote_addr = addr;
	wr.wr.rdma.rkey = rkey;
	MUST(ibv_post_send(b, &wr, &bad) == 0, "B's WRITE");
	struct ibv_wc wc;
	MUST(poll_one(cq, &wc) == 1 && wc.wr_id == 7, "B's WRITE completion");
	return wc.status;
}

// reconnect connects both QPs afresh after B's remote access error (which
// left B in the error state), so that their PSNs start again together.
static void reconnect(struct ibv_qp *b, struct ibv_qp *a, union ibv_gid *gid)
{
	struct ibv_qp_attr r = {.qp_state = IBV_QPS_RESET};
	MUST(ibv_modify_qp(a, &r, IBV_QP_STATE) == 0 && ibv_modify_qp(b, &r, IBV_QP_STATE) == 0, "to RESET");
	to_rts(a, b->qp_num, gid, RC_ACCESS, 4, 0);
	to_rts(b, a->qp_num, gid, RC_ACCESS, 4, 0);
}

int main(void)
{
	struct ibv_context *ctx = open_device();
	struct ibv_device_attr da;
	MUST(ibv_query_device(ctx, &da) == 0, "ibv_query_device");
	CHECK((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) && da.max_mw > 0, "memory windows: caps %x max_mw %d",
	      da.device_cap_flags, da.max_mw);

	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd, "ibv_alloc_pd");
	static char mem[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							      IBV_ACCESS_MW_BIND);
	MUST(mr, "ibv_reg_mr");
	struct ibv_cq *acq = ibv_create_cq(ctx, 16, NULL, NULL, 0), *bcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	MUST(acq && bcq, "ibv_create_cq");
	struct ibv_qp_init_attr_ex qa = {
		.send_cq = acq, .recv_cq = acq, .qp_type = IBV_QPT_RC,
		.cap = {.max_send_wr = 8, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, .pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_RDMA_WRITE,
	};
	struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa);
	qa.send_cq = qa.recv_cq = bcq;
	struct ibv_qp *b = ibv_create_qp_ex(ctx, &qa);
	MUST(a && b, "ibv_create_qp_ex");
	to_rts(a, b->qp_num, &gid, RC_ACCESS, 4, 0);
	to_rts(b, a->qp_num, &gid, RC_ACCESS, 4, 0);
	strcpy(mem + 4096, "window!");

	// Type 1: the bind call, signaled.
	struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	MUST(w1 && w1->type == IBV_MW_TYPE_1 && w1->pd == pd && w1->context == ctx, "ibv_alloc_mw type 1");
	uint32_t old = w1->rkey;
	struct ibv_mw_bind bind = {.wr_id = 11, .send_flags = IBV_SEND_SIGNALED,
				   .bind_info = {.mr = mr, .addr = (uintptr_t)mem + 1024, .length = 64,
						 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE}};
	MUST(ibv_bind_mw(a, w1, &bind) == 0, "ibv_bind_mw");
	CHECK(w1->rkey != old && (w1->rkey & ~0xffu) == (old & ~0xffu), "the window's R_Key %x after the bind (was %x)",
	      w1->rkey, old);
	struct ibv_wc wc;
	MUST(poll_one(acq, &wc) == 1, "the bind's completion");
	CHECK(wc.wr_id == 11 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "bind: id %llu status %d op %d",
	      (unsigned long long)wc.wr_id, wc.status, wc.opcode);
	CHECK(write_via(b, bcq, mr, mem + 4096, (uintptr_t)mem + 1024, w1->rkey) == IBV_WC_SUCCESS, "a WRITE through the window");
	CHECK(memcmp(mem + 1024, "window!", 8) == 0, "the window's bytes: %.8s", mem + 1024);
	CHECK(write_via(b, bcq, mr, mem + 4096, (uintptr_t)mem + 1024 + 60, w1->rkey) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE past the window's end");
	reconnect(b, a, &gid);
	CHECK(write_via(b, bcq, mr, mem + 4096, (uintptr_t)mem + 1024, old) == IBV_WC_REM_ACCESS_ERR,
	      "a WRITE with the window's R_Key before the bind");
	reconnect(b, a, &gid);
	struct ibv_mw_bind type2 = bind;
	struct ibv_mw *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	MUST(w2 && w2->type == IBV_MW_TYPE_2, "ibv_alloc_mw type 2");
	CHECK(ibv_bind_mw(a, w2, &type2) == EINVAL, "the bind call on a type 2 window");

	// Type 2: a BIND_MW work request through ibv_post_send.
	uint32_t k2 = ibv_inc_rkey(w2->rkey);
	struct ibv_send_wr bw = {.wr_id = 12, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED}, *badw;
	bw.bind_mw.mw = w2;
	bw.bind_mw.rkey = k2;
	bw.bind_mw.bind_info = (struct ibv_mw_bind_info){.mr = mr, .addr = (uintptr_t)mem + 2048, .length = 64,
							 .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	MUST(ibv_post_send(a, &bw, &badw) == 0, "BIND_MW");
	MUST(poll_one(acq, &wc) == 1, "BIND_MW's completion");
	CHECK(wc.wr_id == 12 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "BIND_MW: status %d op %d",
	      wc.status, wc.opcode);
	CHECK(write_via(b, bcq, mr, mem + 4096, (uintptr_t)mem + 2048, k2) == IBV_WC_SUCCESS, "a WRITE through the type 2 window");
	CHECK(memcmp(mem + 2048, "window!", 8) == 0, "the type 2 window's bytes: %.8s", mem + 2048);

	// ... and through ibv_wr_bind_mw, after a LOCAL_INV frees it.
	struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
	MUST(ax, "ibv_qp_to_qp_ex");
	struct ibv_send_wr inv = {.wr_id = 13, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
	inv.invalidate_rkey = k2;
	MUST(ibv_post_send(a, &inv, &badw) == 0 && poll_one(acq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "LOCAL_INV: status %d",
	     wc.status);
	uint32_t k3 = ibv_inc_rkey(k2);
	struct ibv_mw_bind_info info = {.mr = mr, .addr = (uintptr_t)mem + 3072, .length = 64,
					.mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
	ibv_wr_start(ax);
	ax->wr_id = 14;
	ax->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(ax, w2, k3, &info);
	MUST(ibv_wr_complete(ax) == 0, "ibv_wr_bind_mw");
	MUST(poll_one(acq, &wc) == 1, "ibv_wr_bind_mw's completion");
	CHECK(wc.wr_id == 14 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, "wr_bind_mw: status %d op %d",
	      wc.status, wc.opcode);
	CHECK(write_via(b, bcq, mr, mem + 4096, (uintptr_t)mem + 3072, k3) == IBV_WC_SUCCESS, "a WRITE after ibv_wr_bind_mw");
	CHECK(memcmp(mem + 3072, "window!", 8) == 0, "the rebound window's bytes: %.8s", mem + 3072);

	MUST(ibv_dealloc_mw(w1) == 0 && ibv_dealloc_mw(w2) == 0, "ibv_dealloc_mw");
	MUST(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	MUST(ibv_destroy_cq(acq) == 0 && ibv_destroy_cq(bcq) == 0, "ibv_destroy_cq");
	MUST(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
	if (failed)
		return 1;
	printf("mw: ok\n");
	return 0;
}
