#!/bin/sh
# The initramfs's /init: make the root a mount with a parent, then become
# systemd. The initramfs is rootfs, which pivot_root(2) refuses to move
# (EINVAL), and every jail pivots; a bind mount of it moved over / is an
# ordinary mount (no copy: the files stay where the kernel unpacked them).
export PATH=/usr/sbin:/usr/bin
mkdir -p /.root
mount --bind / /.root
cd /.root
mount --move . /
exec chroot . /lib/systemd/systemd "$@"
