#!/usr/bin/env bash
# Triton's perf_analyzer (C++), used by the tests to prove the model
# configuration and statistics extensions work for it. Current tritonclient
# wheels no longer carry it; the 2.41.0 wheel does. It links libcudart.so.12
# (taken from NVIDIA's PyPI wheel; no GPU needed) and libb64 (Debian).
# Installs $VENV/tools/perf_analyzer, a wrapper that sets LD_LIBRARY_PATH.
set -euo pipefail
VENV=${1:-.venv}
TOOLS="$VENV/tools"
[ -x "$TOOLS/perf_analyzer" ] && exit 0
mkdir -p "$TOOLS/lib"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$VENV/bin/pip" download --quiet --no-deps --only-binary=:all: --platform manylinux1_x86_64 \
  -d "$work" "tritonclient==2.41.0" 2>/dev/null
"$VENV/bin/pip" download --quiet --no-deps --only-binary=:all: -d "$work" "nvidia-cuda-runtime-cu12==12.9.79" 2>/dev/null
( cd "$work" && unzip -q -o tritonclient-2.41.0-*.whl 'tritonclient-2.41.0.data/data/bin/perf_analyzer' \
  && unzip -q -o nvidia_cuda_runtime_cu12-*.whl 'nvidia/cuda_runtime/lib/libcudart.so.12' )
install -m 0755 "$work/tritonclient-2.41.0.data/data/bin/perf_analyzer" "$TOOLS/perf_analyzer.bin"
install -m 0644 "$work/nvidia/cuda_runtime/lib/libcudart.so.12" "$TOOLS/lib/"
cat > "$TOOLS/perf_analyzer" <<'WRAP'
#!/usr/bin/env bash
here=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/perf_analyzer.bin" "$@"
WRAP
chmod +x "$TOOLS/perf_analyzer"
echo "installed $TOOLS/perf_analyzer"
