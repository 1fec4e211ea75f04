// TestAsyncEvents' program: asynchronous events through async_fd under
// poll(2), ibv_get_async_event and ibv_ack_async_event. Two RC QPs on one
// device connected to each other, B receiving from an SRQ: a SEND takes
// the SRQ below its armed limit (SRQ limit reached, naming the SRQ), A's
// signaled RDMA WRITEs overrun a CQ too small for them (CQ error, naming
// that CQ, then QP fatal, naming A), and B moved to the error state
// reports its last WQE (naming B). It prints what failed and exits 1, or "async: ok".
#include <fcntl.h>
#include <poll.h>
#include "common.h"

// RC_ACCESS is what the connected QPs let each other do.
#define RC_ACCESS (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE)

// wait_event waits up to 5 s for async_fd to be readable and returns the
// event, which the caller acknowledges.
static int wait_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	int n = poll(&p, 1, 5000);
	CHECK(n == 1, "poll(async_fd) = %d: no event within 5 s", n);
	if (n != 1)
		return -1;
	int r = ibv_get_async_event(ctx, ev);
	CHECK(r == 0, "ibv_get_async_event");
	return r;
}

int main(void)
{
	struct ibv_context *ctx = open_device();

	// Nothing yet: a non-blocking read says EAGAIN, poll times out.
	int fl = fcntl(ctx->async_fd, F_GETFL);
	MUST(fl >= 0 && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0, "O_NONBLOCK on async_fd");
	struct ibv_async_event ev;
	errno = 0;
	CHECK(ibv_get_async_event(ctx, &ev) == -1 && errno == EAGAIN, "ibv_get_async_event with no event");
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK(poll(&p, 1, 0) == 0, "poll(async_fd) with no event");

	union ibv_gid gid;
	MUST(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	MUST(pd, "ibv_alloc_pd");
	static char buf[8192];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	MUST(mr, "ibv_reg_mr");
	struct ibv_cq *small = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	MUST(small && cq, "ibv_create_cq");
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	MUST(srq, "ibv_create_srq");
	struct ibv_qp_init_attr qa = {.send_cq = small, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 64, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1}};
	struct ibv_qp *a = ibv_create_qp(pd, &qa);
	qa.send_cq = cq;
	qa.srq = srq;
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	MUST(a && b, "ibv_create_qp");
	to_rts(a, b->qp_num, &gid, RC_ACCESS, 1, 0);
	to_rts(b, a->qp_num, &gid, RC_ACCESS, 1, 0);

	// SRQ limit: four receives, the limit armed at four, one SEND.
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 64 * i, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1}, *bad;
		MUST(ibv_post_srq_recv(srq, &wr, &bad) == 0, "ibv_post_srq_recv");
	}
	struct ibv_srq_attr lim = {.srq_limit = 4};
	MUST(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "arming the SRQ limit");
	{
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 1024, .length = 16, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 100, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		MUST(ibv_post_send(a, &wr, &bad) == 0, "SEND");
		struct ibv_wc wc;
		MUST(poll_one(small, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "the SEND's completion");
	}
	if (wait_event(ctx, &ev) == 0) {
		CHECK(ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED, "event %s, want SRQ limit reached",
		      ibv_event_type_str(ev.event_type));
		CHECK(ev.element.srq == srq, "the event names %p, not the SRQ %p", (void *)ev.element.srq, (void *)srq);
		ibv_ack_async_event(&ev);
		CHECK(srq->events_completed == 1, "acknowledged SRQ events %u", srq->events_completed);
	}

	// CQ error: more signaled WRITEs than the send CQ holds, not polled.
	int writes = small->cqe + 2;
	for (int i = 0; i < writes; i++) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED}, *bad;
		wr.wr.rdma.remote_addr = (uintptr_t)buf + 4096;
		wr.wr.rdma.rkey = mr->rkey;
		MUST(ibv_post_send(a, &wr, &bad) == 0, "WRITE %d", i);
	}
	if (wait_event(ctx, &ev) == 0) {
		CHECK(ev.event_type == IBV_EVENT_CQ_ERR, "event %s, want CQ error", ibv_event_type_str(ev.event_type));
		CHECK(ev.element.cq == small, "CQ error names %p, not the small CQ %p", (void *)ev.element.cq, (void *)small);
		ibv_ack_async_event(&ev);
		CHECK(small->async_events_completed == 1, "acknowledged CQ events %u", small->async_events_completed);
	}
	// ... and the QP whose completion was lost goes to the error state.
	if (wait_event(ctx, &ev) == 0) {
		CHECK(ev.event_type == IBV_EVENT_QP_FATAL, "event %s, want QP fatal", ibv_event_type_str(ev.event_type));
		CHECK(ev.element.qp == a, "the event names %p, not QP A %p", (void *)ev.element.qp, (void *)a);
		ibv_ack_async_event(&ev);
		CHECK(a->events_completed == 1, "acknowledged QP events %u", a->events_completed);
	}

	// Last WQE reached: B, on the SRQ, moved to the error state.
	struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
	MUST(ibv_modify_qp(b, &err, IBV_QP_STATE) == 0, "B to ERR");
	if (wait_event(ctx, &ev) == 0) {
		CHECK(ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED, "event %s, want last WQE reached",
		      ibv_event_type_str(ev.event_type));
		CHECK(ev.element.qp == b, "the event names %p, not QP B %p", (void *)ev.element.qp, (void *)b);
		ibv_ack_async_event(&ev);
		CHECK(b->events_completed == 1, "acknowledged QP events %u", b->events_completed);
	}
	CHECK(poll(&p, 1, 100) == 0, "poll(async_fd) after the events: another event");

	MUST(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	MUST(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq");
	MUST(ibv_destroy_cq(small) == 0 && ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
	MUST(ibv_dereg_mr(mr) == 0 && ibv_dealloc_pd(pd) == 0, "dereg, dealloc");
	MUST(ibv_close_device(ctx) == 0, "ibv_close_device");
	if (failed)
		return 1;
	printf("async: ok\n");
	return 0;
}
