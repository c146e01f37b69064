#!/usr/bin/env bash
# The interpreter `make venv` builds .venv from (the Makefile's PYTHON; `make PYTHON=...` overrides).
#
# The distribution's CPython 3.11 where it has venv (Debian's python3.11 + python3.11-venv): it is
# built with profile-guided optimisation and links libpython statically, so Python code runs faster
# than in a plain source build with a shared libpython (pyenv's default, this machine's `python3`):
# serve answers 3-16% more small requests per second (bench/README.md, "The interpreter"). Else python3.
set -euo pipefail
candidate=/usr/bin/python3.11
if [ -x "$candidate" ] && "$candidate" -c "import ensurepip, venv" >/dev/null 2>&1; then
  echo "$candidate"
else
  echo python3
fi
