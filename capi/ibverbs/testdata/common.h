// The checks and setup that the C test programs in this folder share
// (abi.c, async.c, ex.c, mw.c): each program includes it, uses CHECK and
// MUST, prints what failed, and exits 1 or prints "NAME: ok".
#ifndef SOFTRDMA_TESTDATA_COMMON_H
#define SOFTRDMA_TESTDATA_COMMON_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

// failed is set by every CHECK that does not hold.
static int failed;

// CHECK prints the condition that does not hold, the message and errno,
// and lets the program go on; MUST ends it with status 1 after any failure.
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

// open_device opens the one device the library is given (SOFTRDMA_DEVICES).
static inline struct ibv_context *open_device(void)
{
	int n = -1;
	struct ibv_device **list = ibv_get_device_list(&n);
	MUST(list && n == 1, "ibv_get_device_list: %d devices", n);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	MUST(ctx, "ibv_open_device");
	ibv_free_device_list(list);
	return ctx;
}

// poll_one takes one completion from cq, spinning a bounded number of
// times; it returns 0 if none came.
static inline int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 50000000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n)
			return n;
	}
	return 0;
}

// to_rts takes an RC QP from RESET to RTS, connected to QP dest on the
// same device (GID gid, port 1), with the remote access flags access,
// rd_atomic READs and atomics outstanding each way, and psn as the first
// PSN both ways.
static inline void to_rts(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid, unsigned int access,
			  uint8_t rd_atomic, uint32_t psn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0, "INIT");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = psn;
	a.max_dest_rd_atomic = rd_atomic;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0, "RTR");
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = rd_atomic;
	MUST(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC) == 0, "RTS");
}

#endif
