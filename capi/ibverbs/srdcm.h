// The C side of softrdma's librdmacm (rdmacm.c): the rdma_cm objects a
// program sees are those of Debian's <rdma/rdma_cma.h>, each followed by
// the handle of its Go side (cm.go).
#ifndef SOFTRDMA_SRDCM_H
#define SOFTRDMA_SRDCM_H

#include <netinet/in.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>
#include "srd.h"

// sync marks an ID on a channel of its own (synchronous mode, ep.c);
// ep_attr is the QP a passive rdma_create_ep asked rdma_get_request for.
struct srd_cm_id {
	struct rdma_cm_id id;
	uintptr_t h;
	int sync;
	struct ibv_qp_init_attr *ep_attr;
};
struct srd_cm_channel { struct rdma_event_channel ch; uintptr_t h; };

// srd_cm_info is what the Go side tells about an ID: its device (an index
// in the table of contexts rdmacm.c opened, -1 before it has one) and its
// addresses.
struct srd_cm_info {
	int dev;
	struct sockaddr_storage src, dst;
};

// srd_cm_event_info is an event as the Go side hands it over; rdmacm.c
// builds the rdma_cm_event from it.
struct srd_cm_event_info {
	struct rdma_cm_id *id;        // the ID, or NULL for a new one (new_h)
	uintptr_t new_h;              // the Go handle of a new ID (CONNECT_REQUEST)
	struct rdma_cm_id *listen_id; // CONNECT_REQUEST: the listening ID
	int event, status;
	uint8_t pdata[256];
	int pdata_len;
	uint8_t responder_resources, initiator_depth, flow_control, retry_count, rnr_retry_count, srq;
	uint32_t qp_num, qkey;
	struct ibv_ah_attr ah_attr;
	void *mc_context; // MULTICAST_JOIN/ERROR: the context of the join (mcast.go)
};

// Synchronous mode (ep.c).
int srd_cm_complete(struct rdma_cm_id *id);
void srd_cm_release_sync(struct rdma_event_channel *ch, struct rdma_cm_event *last);
void srd_cm_destroy_cqs(struct rdma_cm_id *id);

#endif
