/*
 * handles_test: uroce's librdmacm refuses an ID that was destroyed, or a
 * pointer that never was an ID, with EINVAL and without reading through
 * it. Passing either is the program's fault, and rdma-core's librdmacm
 * reads through it; but perftest 4.5's -R client does exactly that when
 * it retries a rejected connection (it destroys its IDs, frees the array
 * that held them, and resolves an address on what it reads from there),
 * and a library that faults under it looks like the culprit.
 *
 *   handles_test    prints `ok handles`, or `FAIL handles: reason`
 *
 * Build: gcc -O2 -Wall -Werror -o handles_test handles_test.c -lrdmacm -libverbs
 *
 * It needs a device (a uroce daemon) but no peer. The exit status is 1
 * when a check failed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

static int failed;

static void expect(const char *what, int ret, int e)
{
	if (ret != -1 || errno != e) {
		printf("FAIL handles: %s: returned %d errno %d (%s), want -1 and %s\n", what, ret, ret ? errno : 0,
		       strerror(errno), strerror(e));
		failed = 1;
	}
}

/* every call on an ID that takes one and can fail, on id */
static void refused(const char *kind, struct rdma_cm_id *id)
{
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(18799)};
	inet_pton(AF_INET, "192.0.2.1", &dst.sin_addr);
	struct rdma_conn_param cp = {0};
	struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC, .cap = {.max_send_wr = 1, .max_recv_wr = 1}};
	uint8_t tos = 0;
	char what[96];
#define CHECK(call)                                                   \
	do {                                                          \
		snprintf(what, sizeof(what), "%s on %s", #call, kind); \
		expect(what, call, EINVAL);                           \
	} while (0)
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000));
	CHECK(rdma_resolve_route(id, 2000));
	CHECK(rdma_bind_addr(id, (struct sockaddr *)&dst));
	CHECK(rdma_listen(id, 1));
	CHECK(rdma_connect(id, &cp));
	CHECK(rdma_accept(id, &cp));
	CHECK(rdma_reject(id, NULL, 0));
	CHECK(rdma_disconnect(id));
	CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 1));
	CHECK(rdma_create_qp(id, NULL, &qa));
	CHECK(rdma_establish(id));
	CHECK(rdma_destroy_id(id));
#undef CHECK
	rdma_destroy_qp(id); /* returns nothing: it must only not fault */
}

int main(void)
{
	alarm(60);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		printf("FAIL handles: rdma_create_event_channel: %s\n", strerror(errno));
		return 1;
	}
	struct rdma_cm_id *id;
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) || rdma_destroy_id(id)) {
		printf("FAIL handles: rdma_create_id, rdma_destroy_id: %s\n", strerror(errno));
		return 1;
	}
	refused("a destroyed ID", id);
	rdma_destroy_event_channel(ch);

	/* Memory the program may not read, from one page before to one after. */
	long page = sysconf(_SC_PAGESIZE);
	char *none = mmap(NULL, 2 * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (none == MAP_FAILED) {
		printf("FAIL handles: mmap: %s\n", strerror(errno));
		return 1;
	}
	refused("a pointer that is no ID", (struct rdma_cm_id *)(none + page));
	munmap(none, 2 * page);
	if (!failed)
		printf("ok handles\n");
	return failed;
}
