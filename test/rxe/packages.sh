#!/bin/sh
# Prints, on one line, the Debian packages the rdma_rxe peer harness needs on
# the host: QEMU to run the guests, the tools and libraries copied into the
# guest image, and what build-image.sh uses to unpack the kernel and pack the
# image. ../../run installs the missing ones before the tests; build-image.sh
# does the same when it runs as root.
echo qemu-system-x86 qemu-system-data busybox-static dash \
	rdma-core ibverbs-utils ibverbs-providers perftest rdmacm-utils libibverbs1 librdmacm1 \
	iproute2 tcpdump libc-bin util-linux coreutils findutils \
	apt dpkg cpio kmod gzip xz-utils zstd
