/*
 * Protection domains and memory regions.
 *
 * The daemon reaches a region's bytes one of two ways (SPEC.md, Memory):
 * in a memfd it maps too (shared: plain copies), or through our
 * /proc/PID/mem (process: a system call per packet). A verbs program's
 * buffers are its own memory, so a page-aligned buffer is moved onto a
 * memfd: the pages it spans are copied into a new sealed memfd, which is
 * then mapped over the same addresses (MAP_FIXED|MAP_SHARED): the
 * program sees the same bytes at the same addresses, and the daemon
 * shares them. When no region uses the pages any more, their bytes go
 * back into a private anonymous mapping at the same addresses. Moved
 * ranges are kept in a table, process-wide (the address space is); a
 * region inside a moved range reuses it.
 *
 * Only private anonymous read-write mappings (malloc's heap, mmap'ed
 * memory) are moved. Caveats: a thread that writes to those pages while
 * they are being moved may lose its write, and after fork() a child
 * shares the moved pages with its parent instead of getting a copy.
 * Anything not moved (and everything with UROCE_MR=process) is
 * registered as process memory at its address.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "uverbs.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

UV_LATEST(ibv_alloc_pd);
struct ibv_pd *uv_ibv_alloc_pd_1_1(struct ibv_context *ctx)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	struct up_handle h;
	int err = uv_call(uv_ctx(ctx), UP_OP_ALLOC_PD, NULL, 0, -1, &h, sizeof(h), NULL);
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	pd->context = ctx;
	pd->handle = h.handle;
	return pd;
}

UV_LATEST(ibv_dealloc_pd);
int uv_ibv_dealloc_pd_1_1(struct ibv_pd *pd)
{
	int err = uv_destroy_handle(uv_ctx(pd->context), UP_OP_DEALLOC_PD, pd->handle);
	if (err && err != EIO) /* EIO: the daemon is gone, and the PD with it */
		return err;
	free(pd);
	return 0;
}

/* The moved ranges. */

struct uv_moved {
	uintptr_t start, end; /* whole pages */
	int fd;               /* the memfd, sealed against resizing */
	ino_t ino;
	int refs; /* regions using it */
	struct uv_moved *next;
};

static pthread_mutex_t moved_mu = PTHREAD_MUTEX_INITIALIZER;
static struct uv_moved *moved;

static int process_only(void)
{
	static int v = -1;
	if (v < 0) {
		const char *e = getenv("UROCE_MR");
		v = e && strcmp(e, "process") == 0;
	}
	return v;
}

/* One line of /proc/self/maps. */
struct maps_line {
	uintptr_t a, b;
	char perms[5];
	unsigned long inode;
	const char *path;
};

static int parse_maps_line(char *line, struct maps_line *m)
{
	unsigned long a, b, off;
	char dev[16];
	int pos = 0;
	if (sscanf(line, "%lx-%lx %4s %lx %15s %lu %n", &a, &b, m->perms, &off, dev, &m->inode, &pos) < 6)
		return -1;
	char *p = line + pos;
	p[strcspn(p, "\n")] = 0;
	m->a = a;
	m->b = b;
	m->path = p;
	return 0;
}

/* Whether private anonymous read-write mappings cover [start, end). */
static int movable(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	char line[1024];
	uintptr_t covered = start;
	int ok = 0;
	while (fgets(line, sizeof(line), f)) {
		struct maps_line m;
		if (parse_maps_line(line, &m) < 0)
			continue;
		if (m.b <= covered)
			continue;
		if (m.a > covered)
			break; /* a hole */
		if (strcmp(m.perms, "rw-p") != 0 || m.inode != 0 || (m.path[0] && strcmp(m.path, "[heap]") != 0))
			break;
		covered = m.b;
		if (covered >= end) {
			ok = 1;
			break;
		}
	}
	fclose(f);
	return ok;
}

/* Whether [start, end) is still exactly our mapping of the memfd ino. */
static int still_ours(uintptr_t start, uintptr_t end, ino_t ino)
{
	FILE *f = fopen("/proc/self/maps", "re");
	if (!f)
		return 0;
	char line[1024];
	int ok = 0;
	while (fgets(line, sizeof(line), f)) {
		struct maps_line m;
		if (parse_maps_line(line, &m) < 0)
			continue;
		if (m.a == start && m.b == end && m.inode == ino && m.perms[3] == 's') {
			ok = 1;
			break;
		}
		if (m.a >= end)
			break;
	}
	fclose(f);
	return ok;
}

static struct uv_moved *move_range(uintptr_t start, uintptr_t end)
{
	size_t size = end - start;
	int fd = memfd_create("uroce-mr", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return NULL;
	struct stat st;
	if (ftruncate(fd, size) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0 || fstat(fd, &st) < 0)
		goto fail;
	/* pwrite, not memcpy: a page we may not read fails with EFAULT instead of a fault. */
	for (size_t off = 0; off < size;) {
		ssize_t n = pwrite(fd, (void *)(start + off), size - off, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			goto fail;
		off += n;
	}
	if (mmap((void *)start, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
		goto fail;
	struct uv_moved *r = calloc(1, sizeof(*r));
	if (!r) {
		/* Mapped already: keep it, it holds the bytes; the table just will not know it. */
		close(fd);
		return NULL;
	}
	r->start = start;
	r->end = end;
	r->fd = fd;
	r->ino = st.st_ino;
	uv_debug("moved %#lx-%#lx (%zu bytes) onto a memfd", (unsigned long)start, (unsigned long)end, size);
	return r;
fail:
	uv_debug("cannot move %#lx-%#lx onto a memfd: %s", (unsigned long)start, (unsigned long)end, strerror(errno));
	close(fd);
	return NULL;
}

/* Puts the bytes of r back into private anonymous memory at the same addresses. */
static void restore_range(struct uv_moved *r)
{
	size_t size = r->end - r->start;
	if (still_ours(r->start, r->end, r->ino)) {
		void *tmp = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (tmp != MAP_FAILED) {
			memcpy(tmp, (void *)r->start, size);
			if (mremap(tmp, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)r->start) == MAP_FAILED) {
				uv_debug("cannot move %#lx-%#lx back: %s", (unsigned long)r->start,
					 (unsigned long)r->end, strerror(errno));
				munmap(tmp, size);
			}
		}
	} else {
		uv_debug("%#lx-%#lx was unmapped or replaced while registered: left as it is",
			 (unsigned long)r->start, (unsigned long)r->end);
	}
	close(r->fd);
	free(r);
}

/*
 * The moved range holding [addr, addr+len), moving the pages there if
 * addr is page-aligned and nothing of them is moved yet; NULL when the
 * region is to be process memory. The caller owns a reference.
 */
static struct uv_moved *get_range(uintptr_t addr, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	uintptr_t start = addr & ~(uintptr_t)(page - 1);
	uintptr_t end = (addr + len + page - 1) & ~(uintptr_t)(page - 1);
	if (end < start || addr + len < addr)
		return NULL;
	pthread_mutex_lock(&moved_mu);
	struct uv_moved *r;
	for (r = moved; r; r = r->next) {
		if (r->start <= addr && addr + len <= r->end) {
			r->refs++;
			pthread_mutex_unlock(&moved_mu);
			return r;
		}
		if (r->start < end && start < r->end)
			break; /* overlaps a moved range partly */
	}
	if (!r && addr == start && movable(start, end) && (r = move_range(start, end))) {
		r->refs = 1;
		r->next = moved;
		moved = r;
	} else {
		r = NULL;
	}
	pthread_mutex_unlock(&moved_mu);
	return r;
}

static void put_range(struct uv_moved *r)
{
	pthread_mutex_lock(&moved_mu);
	if (--r->refs > 0) {
		pthread_mutex_unlock(&moved_mu);
		return;
	}
	for (struct uv_moved **p = &moved; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			break;
		}
	}
	/* Restored under the lock: a region registered meanwhile sees either moved or private pages. */
	restore_range(r);
	pthread_mutex_unlock(&moved_mu);
}

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	if (!pd || length == 0) {
		errno = EINVAL;
		return NULL;
	}
	/* As the kernel checks (ib_check_mr_access): remote write and atomics need local write. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
	struct uv_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	struct uv_context *c = uv_ctx(pd->context);
	struct up_reg_mr req = {.pd = pd->handle, .access = access, .iova = iova, .length = length};
	uintptr_t a = (uintptr_t)addr;
	m->moved = process_only() ? NULL : get_range(a, length);
	int fd = -1;
	if (m->moved) {
		req.kind = UP_MEM_SHARED;
		req.addr = a - m->moved->start;
		fd = m->moved->fd;
	} else {
		req.kind = UP_MEM_PROCESS;
		req.addr = a;
	}
	struct up_reg_mr_resp r;
	int err = uv_call(c, UP_OP_REG_MR, &req, sizeof(req), fd, &r, sizeof(r), NULL);
	if (err) {
		if (m->moved)
			put_range(m->moved);
		free(m);
		errno = err;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.handle = r.mr;
	m->mr.lkey = r.lkey;
	m->mr.rkey = r.rkey;
	uv_debug("reg mr %p+%zu: %s, lkey %#x", addr, length, m->moved ? "shared" : "process", r.lkey);
	return &m->mr;
}

UV_LATEST(ibv_reg_mr);
struct ibv_mr *uv_ibv_reg_mr_1_1(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return reg_mr(pd, addr, length, (uintptr_t)addr, access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	return reg_mr(pd, addr, length, iova, access);
}

/*
 * verbs_context.advise_mr (ibv_advise_mr): prefetching is advice, and the
 * daemon reads a client's pages when a packet needs them, so there is
 * nothing to do beyond the checks rdma-core's providers make.
 */
int uv_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice, uint32_t flags, struct ibv_sge *sg_list,
		 uint32_t num_sge)
{
	(void)pd;
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return EOPNOTSUPP;
	if ((flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH) || !sg_list || num_sge == 0)
		return EINVAL;
	return 0;
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova, int fd,
				 int access)
{
	(void)pd, (void)offset, (void)length, (void)iova, (void)fd, (void)access;
	errno = EOPNOTSUPP;
	return NULL;
}

UV_LATEST(ibv_dereg_mr);
int uv_ibv_dereg_mr_1_1(struct ibv_mr *mr)
{
	struct uv_mr *m = (struct uv_mr *)mr;
	int err = uv_destroy_handle(uv_ctx(mr->context), UP_OP_DEREG_MR, mr->handle);
	if (err && err != EIO)
		return err;
	/* The daemon touches the memory no more. */
	if (m->moved)
		put_range(m->moved);
	free(m);
	return 0;
}

int ibv_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t length, int access)
{
	(void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
	errno = EOPNOTSUPP;
	return IBV_REREG_MR_ERR_INPUT; /* the region is unchanged and still valid */
}
