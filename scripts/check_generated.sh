#!/usr/bin/env bash
# Regenerate the protobuf/gRPC modules into a scratch directory and fail if the
# checked-in files differ (run `make proto` to update them).
set -euo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
make -s proto PROTO_OUT="$scratch" >/dev/null
status=0
for f in $(git ls-files '*_pb2.py' '*_pb2.pyi' '*_pb2_grpc.py'); do
  if ! cmp -s "$f" "$scratch/$f"; then
    echo "out of date: $f (run make proto)"; status=1
  fi
done
[ $status -eq 0 ] && echo "generated code is up to date"
exit $status
