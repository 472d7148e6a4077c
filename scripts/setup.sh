#!/usr/bin/env bash
# Installs what perfring's build, tests and examples need on Debian/Ubuntu: the one list,
# used by the README's set-up command and by CI (.ci/run). Safe to run again.
#
#   libclang-dev   bindgen generates the kernel's structs at build time
#   gcc            the tests compile C programs; the C API example
#   binutils       nm and addr2line, which some tests compare with
#   python3        the injector's tests run a Python program under it
#   linux-perf     perf script / perf report / perf stat read and compare perfring's output
#                  (Ubuntu: linux-tools-common and linux-tools-$(uname -r))
#   golang-go      go tool pprof reads perfring's pprof back
#   libc6-dbg      libc's internal functions are named from its debug file
#   pkg-config     the C API's pkg-config file (capi/perfring.pc)
#   nodejs         a JIT runtime whose perf map the JIT tests name frames from
#   chromium       the flame graph test opens the SVG in headless Chromium
#   ca-certificates  the system's CAs, which record --push trusts for https:// stores
#   strace         a test compares explain with what perf passes to perf_event_open
#   procps         ps and kill, which the tests use on the processes they start
#   util-linux     setpriv (tests as an unprivileged user) and script (a terminal)
#
# Tracepoint tests need tracefs: it is mounted at /sys/kernel/tracing if it is not.
set -euo pipefail
packages=(libclang-dev gcc binutils python3 golang-go libc6-dbg pkg-config nodejs chromium ca-certificates strace procps util-linux)
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
# perf: Debian's linux-perf, or Ubuntu's tools for the running kernel.
perf_works() { perf --version >/dev/null 2>&1; }
perf_wanted=0
perf_works || perf_wanted=1

if [ ${#missing[@]} -gt 0 ] || [ $perf_wanted = 1 ]; then
  $SUDO apt-get update -q
  if [ $perf_wanted = 1 ]; then
    if apt-cache show linux-perf >/dev/null 2>&1; then
      missing+=(linux-perf)
    else
      missing+=(linux-tools-common "linux-tools-$(uname -r)")
    fi
  fi
  echo "setup: installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
  perf_works || { echo "setup: perf still does not run (perf --version); install it for this kernel" >&2; exit 1; }
else
  echo "setup: every package is installed (${packages[*]} and perf)"
fi

# Tracepoint ids come from tracefs.
if [ ! -d /sys/kernel/tracing/events ]; then
  if $SUDO mount -t tracefs nodev /sys/kernel/tracing; then
    echo "setup: mounted tracefs at /sys/kernel/tracing"
  else
    echo "setup: could not mount tracefs at /sys/kernel/tracing: the tracepoint tests will fail saying so" >&2
  fi
fi
