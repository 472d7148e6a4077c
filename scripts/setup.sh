#!/usr/bin/env bash
# Installs what perfring's build, tests and examples need on Debian/Ubuntu: the one list,
# used by the README's set-up command and by CI (.ci/run). Safe to run again.
#
#   libclang-dev   bindgen generates the kernel's structs at build time
#   gcc            the tests compile C programs; the C API example
#   binutils       nm and addr2line, which some tests compare with
#   python3        the injector's tests run a Python program under it
#   linux-perf     perf script / perf report read perfring's perf.data back
#   golang-go      go tool pprof reads perfring's pprof back
#   libc6-dbg      libc's internal functions are named from its debug file
#   pkg-config     the C API's pkg-config file (perfring.pc)
#   nodejs         a JIT runtime whose perf map the JIT tests name frames from
#   chromium       the flame graph test opens the SVG in headless Chromium
#   ca-certificates  the system's CAs, which record --push trusts for https:// stores
#   util-linux     setpriv (tests as an unprivileged user) and script (a terminal)
set -euo pipefail
packages=(libclang-dev gcc binutils python3 linux-perf golang-go libc6-dbg pkg-config nodejs chromium ca-certificates util-linux)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: every package is installed (${packages[*]})"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
