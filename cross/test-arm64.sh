#!/bin/sh
# `make test-arm64` (issue 21): cross-compiles the C core and the C tests for
# aarch64 (cross/aarch64-linux-gnu.ini, no Python extension) into
# build-arm64/ and runs tests/c's kiln_ctest under qemu-aarch64 (user mode,
# the target's libc from /usr/aarch64-linux-gnu), once per emulated CPU and
# ISA cap in RUNS. Installs the cross compiler and qemu-user with apt-get
# when they are missing.
#
#   cross/test-arm64.sh [full|quick] [MESON]
#
# full (the default): `-cpu max` (ASIMD, dotprod, bf16, i8mm, SVE: kiln's
# top level is neon, and the tests that loop over ISA levels run generic and
# neon), the same CPU capped with KILN_ISA=generic (every other test at the
# generic level too), and cortex-a53 (ASIMD only, no dotprod/bf16/SVE).
# quick: the `-cpu max` run only.
# Emulation says nothing about speed: the times printed are qemu's.
set -eu
MODE=${1:-full}
MESON=${2:-meson}
BUILD=build-arm64
SYSROOT=/usr/aarch64-linux-gnu

need=""
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need="$need gcc-aarch64-linux-gnu"
command -v qemu-aarch64 >/dev/null 2>&1 || need="$need qemu-user"
if [ -n "$need" ]; then
  echo "test-arm64: installing$need"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need || {
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need; }
fi

test -f $BUILD/build.ninja || \
  "$MESON" setup $BUILD --cross-file cross/aarch64-linux-gnu.ini -Dpython=false
ninja -C $BUILD tests/c/kiln_ctest

case "$MODE" in
  quick) RUNS="max:" ;;
  *) RUNS="max: max:generic cortex-a53:" ;;
esac

status=0
summary=""
for run in $RUNS; do
  cpu=${run%%:*}
  cap=${run#*:}
  label="-cpu $cpu${cap:+, KILN_ISA=$cap}"
  echo "== kiln_ctest under qemu-aarch64 $label"
  log=$BUILD/ctest-$cpu${cap:+-$cap}.log
  t0=$(date +%s)
  rc=0
  if [ -n "$cap" ]; then
    KILN_ISA=$cap qemu-aarch64 -cpu "$cpu" -L $SYSROOT $BUILD/tests/c/kiln_ctest >"$log" 2>&1 || rc=$?
  else
    env -u KILN_ISA qemu-aarch64 -cpu "$cpu" -L $SYSROOT $BUILD/tests/c/kiln_ctest >"$log" 2>&1 || rc=$?
  fi
  t1=$(date +%s)
  grep -E '^cpu:|FAILED|^[0-9]+ passed' "$log" || true
  [ $rc -eq 0 ] || { status=1; echo "   (exit $rc; full log: $log)"; }
  line=$(grep -E '^[0-9]+ passed' "$log" | tail -1 || true)
  summary="$summary
  $label: ${line:-no result (exit $rc)}, $((t1 - t0)) s"
done
echo "== test-arm64 summary:$summary"
exit $status
