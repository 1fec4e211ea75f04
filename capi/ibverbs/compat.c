//go:build capi

// The rest of libibverbs' public functions that Debian's librdmacm and
// perftest reference: conversions from the kernel's structures, address
// handles from received completions, GID entries, P_Key lookup.
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
#include <infiniband/sa.h>
#include "srd.h"
#include "_cgo_export.h"

#define SRD_EXPORT __attribute__((visibility("default")))

SRD_EXPORT void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src)
{
	memcpy(dst->grh.dgid.raw, src->grh.dgid, sizeof(dst->grh.dgid));
	dst->grh.flow_label = src->grh.flow_label;
	dst->grh.sgid_index = src->grh.sgid_index;
	dst->grh.hop_limit = src->grh.hop_limit;
	dst->grh.traffic_class = src->grh.traffic_class;
	dst->dlid = src->dlid;
	dst->sl = src->sl;
	dst->src_path_bits = src->src_path_bits;
	dst->static_rate = src->static_rate;
	dst->is_global = src->is_global;
	dst->port_num = src->port_num;
}

SRD_EXPORT void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src)
{
	dst->cur_qp_state = src->cur_qp_state;
	dst->path_mtu = src->path_mtu;
	dst->path_mig_state = src->path_mig_state;
	dst->qkey = src->qkey;
	dst->rq_psn = src->rq_psn;
	dst->sq_psn = src->sq_psn;
	dst->dest_qp_num = src->dest_qp_num;
	dst->qp_access_flags = src->qp_access_flags;
	dst->cap.max_send_wr = src->max_send_wr;
	dst->cap.max_recv_wr = src->max_recv_wr;
	dst->cap.max_send_sge = src->max_send_sge;
	dst->cap.max_recv_sge = src->max_recv_sge;
	dst->cap.max_inline_data = src->max_inline_data;
	ibv_copy_ah_attr_from_kern(&dst->ah_attr, &src->ah_attr);
	ibv_copy_ah_attr_from_kern(&dst->alt_ah_attr, &src->alt_ah_attr);
	dst->pkey_index = src->pkey_index;
	dst->alt_pkey_index = src->alt_pkey_index;
	dst->en_sqd_async_notify = src->en_sqd_async_notify;
	dst->sq_draining = src->sq_draining;
	dst->max_rd_atomic = src->max_rd_atomic;
	dst->max_dest_rd_atomic = src->max_dest_rd_atomic;
	dst->min_rnr_timer = src->min_rnr_timer;
	dst->port_num = src->port_num;
	dst->timeout = src->timeout;
	dst->retry_cnt = src->retry_cnt;
	dst->rnr_retry = src->rnr_retry;
	dst->alt_port_num = src->alt_port_num;
	dst->alt_timeout = src->alt_timeout;
}

SRD_EXPORT void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src)
{
	memcpy(dst->dgid.raw, src->dgid, sizeof(dst->dgid));
	memcpy(dst->sgid.raw, src->sgid, sizeof(dst->sgid));
	dst->dlid = src->dlid;
	dst->slid = src->slid;
	dst->raw_traffic = src->raw_traffic;
	dst->flow_label = src->flow_label;
	dst->hop_limit = src->hop_limit;
	dst->traffic_class = src->traffic_class;
	dst->reversible = src->reversible;
	dst->numb_path = src->numb_path;
	dst->pkey = src->pkey;
	dst->sl = src->sl;
	dst->mtu_selector = src->mtu_selector;
	dst->mtu = src->mtu;
	dst->rate_selector = src->rate_selector;
	dst->rate = src->rate;
	dst->packet_life_time_selector = src->packet_life_time_selector;
	dst->packet_life_time = src->packet_life_time;
	dst->preference = src->preference;
}

SRD_EXPORT const char *ibv_get_sysfs_path(void)
{
	return "/sys";
}

SRD_EXPORT int ibv_get_pkey_index(struct ibv_context *context, uint8_t port_num, __be16 pkey)
{
	__be16 p;
	for (int i = 0; ibv_query_pkey(context, port_num, i, &p) == 0; i++)
		if (p == pkey)
			return i;
	return -1;
}

SRD_EXPORT int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

SRD_EXPORT int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece)
{
	(void)qp;
	(void)ece;
	return EOPNOTSUPP;
}

// _ibv_query_gid_ex is what the header's ibv_query_gid_ex calls: every
// softrdma GID is RoCE v2, on the interface of its address.
SRD_EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port_num, uint32_t gid_index,
				 struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size)
{
	if (!context || !entry || flags || entry_size < sizeof(*entry) || port_num > 255)
		return EINVAL;
	union ibv_gid gid;
	if (gid_index > INT32_MAX || ibv_query_gid(context, port_num, (int)gid_index, &gid))
		return errno ? errno : EINVAL;
	memset(entry, 0, entry_size);
	entry->gid = gid;
	entry->gid_index = gid_index;
	entry->port_num = port_num;
	entry->gid_type = IBV_GID_TYPE_ROCE_V2;
	entry->ndev_ifindex = srdgo_gid_ifindex(srd_ctx(context)->h, (int)gid_index);
	return 0;
}

SRD_EXPORT ssize_t _ibv_query_gid_table(struct ibv_context *context, struct ibv_gid_entry *entries, size_t max_entries,
					uint32_t flags, size_t entry_size)
{
	if (!context || flags || entry_size < sizeof(*entries))
		return -EINVAL;
	struct ibv_device_attr da;
	int err = ibv_query_device(context, &da);
	if (err)
		return -err;
	size_t n = 0;
	for (uint32_t port = 1; port <= da.phys_port_cnt; port++) {
		for (uint32_t i = 0;; i++) {
			struct ibv_gid_entry e;
			if (_ibv_query_gid_ex(context, port, i, &e, 0, sizeof(e)))
				break;
			if (n == max_entries)
				return -EINVAL;
			memcpy((char *)entries + n * entry_size, &e, sizeof(e));
			n++;
		}
	}
	return (ssize_t)n;
}

// grh_version says whether a received GRH area holds an IPv6 header (6)
// or, RoCEv2 over IPv4, an IPv4 header in its last 20 bytes (4), as rxe
// and softrdma deliver them.
static int grh_version(const struct ibv_grh *grh)
{
	const uint8_t *ip4 = (const uint8_t *)grh + 20;
	int ip6 = (ntohl(grh->version_tclass_flow) >> 28) == 6;
	if (ip4[0] != 0x45)
		return ip6 ? 6 : -1;
	if (!ip6)
		return 4;
	uint32_t sum = 0; // an IPv4 header is one only if its checksum holds
	for (int i = 0; i < 20; i += 2)
		sum += (uint32_t)ip4[i] << 8 | ip4[i + 1];
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff ? 4 : 6;
}

SRD_EXPORT int ibv_init_ah_from_wc(struct ibv_context *context, uint8_t port_num, struct ibv_wc *wc,
				   struct ibv_grh *grh, struct ibv_ah_attr *ah_attr)
{
	if (!context || !wc || !ah_attr)
		return EINVAL;
	memset(ah_attr, 0, sizeof(*ah_attr));
	ah_attr->dlid = wc->slid;
	ah_attr->sl = wc->sl;
	ah_attr->src_path_bits = wc->dlid_path_bits;
	ah_attr->port_num = port_num;
	if (!(wc->wc_flags & IBV_WC_GRH))
		return 0;
	if (!grh)
		return EINVAL;
	union ibv_gid sgid;
	ah_attr->is_global = 1;
	ah_attr->grh.hop_limit = 0xff;
	switch (grh_version(grh)) {
	case 4: {
		const uint8_t *ip4 = (const uint8_t *)grh + 20;
		memset(&sgid, 0, sizeof(sgid));
		memset(&ah_attr->grh.dgid, 0, sizeof(ah_attr->grh.dgid));
		sgid.raw[10] = sgid.raw[11] = 0xff;
		ah_attr->grh.dgid.raw[10] = ah_attr->grh.dgid.raw[11] = 0xff;
		memcpy(&sgid.raw[12], ip4 + 16, 4);			// the packet's destination
		memcpy(&ah_attr->grh.dgid.raw[12], ip4 + 12, 4);	// its source
		ah_attr->grh.traffic_class = ip4[1];
		break;
	}
	case 6: {
		uint32_t v = ntohl(grh->version_tclass_flow);
		sgid = grh->dgid;
		ah_attr->grh.dgid = grh->sgid;
		ah_attr->grh.flow_label = v & 0xfffff;
		ah_attr->grh.traffic_class = (v >> 20) & 0xff;
		break;
	}
	default:
		return EPROTONOSUPPORT;
	}
	union ibv_gid g;
	for (int i = 0; ibv_query_gid(context, port_num, i, &g) == 0; i++) {
		if (!memcmp(&g, &sgid, sizeof(g))) {
			ah_attr->grh.sgid_index = (uint8_t)i;
			return 0;
		}
	}
	return ENOENT; // the packet was not addressed to one of our GIDs
}

SRD_EXPORT struct ibv_ah *ibv_create_ah_from_wc(struct ibv_pd *pd, struct ibv_wc *wc, struct ibv_grh *grh,
						 uint8_t port_num)
{
	struct ibv_ah_attr a;
	int err = ibv_init_ah_from_wc(pd ? pd->context : NULL, port_num, wc, grh, &a);
	if (err) {
		errno = err;
		return NULL;
	}
	return ibv_create_ah(pd, &a);
}
