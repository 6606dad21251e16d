/*
 * ucx_api.h - the UCX calls the ucx transport makes, as a table filled at run time.
 *
 * libweft does not link UCX: a process whose communicators never use the ucx transport
 * (in auto mode: on a host that lists no RDMA device) never loads it, so libucs's memory
 * hooks and threads stay out of an application that dlopens weft (a Python process, the
 * NCCL shim under PyTorch), and where it is loaded the signal handlers libucs replaces
 * are put back (ucx_api.c). ucx_api_load opens libucp.so.0 (the loader's search: LD_LIBRARY_PATH selects
 * another UCX build, as for Open MPI) when the transport is forced or an RDMA device is
 * present, and fills the table once per process. The table's types are the headers' own
 * (__typeof__), so every call is checked against the UCX this was compiled with.
 *
 * Every file of comm/ucx/ includes this header, and its calls keep UCX's names: below,
 * each name is redirected to the table's entry (ucx_api.c, which fills it, sees the real
 * declarations only). ucp_init, an inline in ucp.h calling ucp_init_version, is not in
 * the table: call ucp_init_version.
 */
#ifndef WEFT_UCX_API_H
#define WEFT_UCX_API_H

#include <ucp/api/ucp.h>
#include <ucs/debug/debug.h>
#include <uct/api/uct.h>

#include "weft.h"

#define UCX_API_CALLS(X)                                                                   \
    X(ucp_config_read) X(ucp_config_modify) X(ucp_config_release) X(ucp_init_version)     \
    X(ucp_cleanup) X(ucp_worker_create) X(ucp_worker_destroy) X(ucp_worker_progress)      \
    X(ucp_worker_query) X(ucp_worker_release_address) X(ucp_ep_create) X(ucp_ep_close_nbx) \
    X(ucp_ep_flush_nbx) X(ucp_ep_print_info) X(ucp_ep_rkey_unpack) X(ucp_rkey_pack)       \
    X(ucp_rkey_buffer_release) X(ucp_rkey_destroy) X(ucp_mem_map) X(ucp_mem_unmap)        \
    X(ucp_put_nbx) X(ucp_get_nbx) X(ucp_request_cancel) X(ucp_request_check_status)       \
    X(ucp_request_free) X(ucp_tag_send_nbx) X(ucp_tag_recv_nbx) X(ucp_tag_msg_recv_nbx)   \
    X(ucp_tag_probe_nb) X(ucp_tag_recv_request_test) X(ucs_status_string)                 \
    X(ucs_debug_disable_signal) X(uct_query_components) X(uct_component_query)           \
    X(uct_release_component_list)

typedef struct ucx_api {
#define UCX_API_FIELD(f) __typeof__(f) *f;
    UCX_API_CALLS(UCX_API_FIELD)
#undef UCX_API_FIELD
} ucx_api_t;

extern ucx_api_t ucx_api;

/* Loads UCX once per process and fills ucx_api: WEFT_OK, or WEFT_ERR_UNSUPPORTED saying
 * why (no libucp.so.0, a call missing from it); the same answer on every call. */
weft_status_t ucx_api_load(void);

#ifndef UCX_API_DEFINE
#define ucp_config_read (ucx_api.ucp_config_read)
#define ucp_config_modify (ucx_api.ucp_config_modify)
#define ucp_config_release (ucx_api.ucp_config_release)
#define ucp_init_version (ucx_api.ucp_init_version)
#define ucp_cleanup (ucx_api.ucp_cleanup)
#define ucp_worker_create (ucx_api.ucp_worker_create)
#define ucp_worker_destroy (ucx_api.ucp_worker_destroy)
#define ucp_worker_progress (ucx_api.ucp_worker_progress)
#define ucp_worker_query (ucx_api.ucp_worker_query)
#define ucp_worker_release_address (ucx_api.ucp_worker_release_address)
#define ucp_ep_create (ucx_api.ucp_ep_create)
#define ucp_ep_close_nbx (ucx_api.ucp_ep_close_nbx)
#define ucp_ep_flush_nbx (ucx_api.ucp_ep_flush_nbx)
#define ucp_ep_print_info (ucx_api.ucp_ep_print_info)
#define ucp_ep_rkey_unpack (ucx_api.ucp_ep_rkey_unpack)
#define ucp_rkey_pack (ucx_api.ucp_rkey_pack)
#define ucp_rkey_buffer_release (ucx_api.ucp_rkey_buffer_release)
#define ucp_rkey_destroy (ucx_api.ucp_rkey_destroy)
#define ucp_mem_map (ucx_api.ucp_mem_map)
#define ucp_mem_unmap (ucx_api.ucp_mem_unmap)
#define ucp_put_nbx (ucx_api.ucp_put_nbx)
#define ucp_get_nbx (ucx_api.ucp_get_nbx)
#define ucp_request_cancel (ucx_api.ucp_request_cancel)
#define ucp_request_check_status (ucx_api.ucp_request_check_status)
#define ucp_request_free (ucx_api.ucp_request_free)
#define ucp_tag_send_nbx (ucx_api.ucp_tag_send_nbx)
#define ucp_tag_recv_nbx (ucx_api.ucp_tag_recv_nbx)
#define ucp_tag_msg_recv_nbx (ucx_api.ucp_tag_msg_recv_nbx)
#define ucp_tag_probe_nb (ucx_api.ucp_tag_probe_nb)
#define ucp_tag_recv_request_test (ucx_api.ucp_tag_recv_request_test)
#define ucs_status_string (ucx_api.ucs_status_string)
#define ucs_debug_disable_signal (ucx_api.ucs_debug_disable_signal)
#define uct_query_components (ucx_api.uct_query_components)
#define uct_component_query (ucx_api.uct_component_query)
#define uct_release_component_list (ucx_api.uct_release_component_list)
#endif

#endif
