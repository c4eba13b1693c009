# shellcheck shell=bash
# Sourced by tools/gpu-check.sh and tools/gpu-prebuild.sh: how the binaries of an unpacked
# .gpu-prebuilt archive start on this machine. The archive holds every shared library they need
# except glibc and the CUDA libraries (cudart, cuBLAS, cuBLASLt, cuDNN: the machine's own, matching
# its driver); its lib/cxx holds the build machine's libstdc++ and libgcc_s, used only where this
# machine's are older than the binaries need (BUILD_INFO's "needs" line says what they need).
#
#   prebuilt_env DIR   sets PT_LDP (the LD_LIBRARY_PATH for our binaries), PT_ENV_NOTE (what was
#                      chosen, one line) and PT_ENV_PROBLEM (empty when the binaries can start)
#   PT_BUNDLED_CXX=1 / 0 forces lib/cxx on / off (default: auto)

# The directory holding a library, from the loader's cache, the CUDA toolkit or pip's nvidia-*
# wheels (PyTorch's CUDA libraries); empty when not found.
lib_dir() {
  local f
  f=$(ldconfig -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ && !f {f = $NF} END {print f}')
  if [ -z "$f" ]; then
    f=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ /usr/local/cuda/lib/ \
              /usr/lib/x86_64-linux-gnu/ -maxdepth 1 -name "$1" 2>/dev/null | head -1)
  fi
  if [ -z "$f" ] && command -v python3 >/dev/null; then
    local site
    site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
    [ -n "$site" ] && f=$(find "$site/nvidia" -name "$1" 2>/dev/null | head -1)
  fi
  [ -n "$f" ] && dirname "$f"
}

# version_lt A B: true when version A sorts before B.
version_lt() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]; }

prebuilt_env() {
  local dir=$1 l d cuda_dirs="" missing="" needs glibc_need glibcxx_need cxxabi_need cxx_glibc have sys_cxx cxx=""
  PT_LDP="" PT_ENV_NOTE="" PT_ENV_PROBLEM=""
  for l in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9; do
    d=$(lib_dir "$l")
    if [ -z "$d" ]; then
      missing+=" $l"
    else
      case ":$cuda_dirs" in *":$d:"*) ;; *) cuda_dirs+="$d:" ;; esac
    fi
  done
  [ -n "$missing" ] && PT_ENV_PROBLEM+="no$missing on this machine; "
  needs=$(sed -n 's/^needs //p' "$dir/BUILD_INFO" 2>/dev/null)
  glibc_need=$(grep -o 'GLIBC_[0-9.]*' <<<"$needs" | head -1 | cut -d_ -f2)
  glibcxx_need=$(grep -o 'GLIBCXX_[0-9.]*' <<<"$needs" | head -1)
  cxxabi_need=$(grep -o 'CXXABI_[0-9.]*' <<<"$needs" | head -1)
  cxx_glibc=$(sed -n 's/^lib\/cxx needs //p' "$dir/BUILD_INFO" 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | head -1 | cut -d_ -f2)
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  if [ -n "$glibc_need" ] && [ -n "$have" ] && version_lt "$have" "$glibc_need"; then
    PT_ENV_PROBLEM+="glibc $have here, the binaries need $glibc_need (rebuild on an older distribution); "
  fi
  sys_cxx=$(ldconfig -p 2>/dev/null | awk '$1 == "libstdc++.so.6" && /x86-64/ && !f {f = $NF} END {print f}')
  case "${PT_BUNDLED_CXX:-auto}" in
    1) cxx="bundled (PT_BUNDLED_CXX=1)" ;;
    0) cxx="" ;;
    *) if [ -z "$sys_cxx" ]; then
         cxx="bundled: no libstdc++.so.6 in the loader cache"
       elif { [ -n "$glibcxx_need" ] && ! grep -qa "$glibcxx_need" "$sys_cxx"; } ||
            { [ -n "$cxxabi_need" ] && ! grep -qa "$cxxabi_need" "$sys_cxx"; }; then
         cxx="bundled: $sys_cxx lacks $glibcxx_need / $cxxabi_need"
       fi ;;
  esac
  if [ -n "$cxx" ]; then
    [ -f "$dir/lib/cxx/libstdc++.so.6" ] || PT_ENV_PROBLEM+="the archive has no lib/cxx/libstdc++.so.6; "
    if [ -n "$cxx_glibc" ] && [ -n "$have" ] && version_lt "$have" "$cxx_glibc"; then
      PT_ENV_PROBLEM+="the bundled libstdc++ needs glibc $cxx_glibc, this machine has $have; "
    fi
    PT_LDP="$dir/lib:$dir/lib/cxx:$cuda_dirs${LD_LIBRARY_PATH:-}"
    PT_ENV_NOTE="libstdc++ $cxx"
  else
    PT_LDP="$dir/lib:$cuda_dirs${LD_LIBRARY_PATH:-}"
    PT_ENV_NOTE="libstdc++ of this machine${sys_cxx:+ ($sys_cxx)}"
  fi
  PT_ENV_NOTE+=", glibc ${have:-?} (needs ${glibc_need:-?}), CUDA libraries from ${cuda_dirs%:}"
  PT_LDP=${PT_LDP%:}
}
