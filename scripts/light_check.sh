#!/usr/bin/env bash
# The light install, checked in a bare environment: build the wheel, install it (not editable)
# into a fresh virtual environment with its base dependencies only (numpy, scipy, tqdm, msgspec,
# from the registry), and run, from a folder outside the repository:
#   - spectr-gbv --help, spectr-gbv certify --help, spectr-gbv exact on the toy models;
#   - the oracle's harness (certify_verifier, certify_lossless) imported without torch;
#   - spectr-gbv certify endpoint URL --reference self against a correct loopback test server
#     (tests/helpers/fake_deployment.py: an exact Markov chain on 127.0.0.1): exit 0, PASS;
#   - spectr-gbv certify log on a recorded log of the same chain (tests/helpers/recorded_logs.py):
#     exit 0, PASS;
#   - commands that need an extra (certify verifiers: torch; oracle: cvxpy) answer one line
#     naming the extra to install, exit 2, no traceback.
# Prints the wheel's size and the install time; the last line is `light check: PASS`, or it
# exits non-zero.  The wheel is built from a copy of the working tree (tracked and untracked
# files that git does not ignore), so nothing (build/) is left in the tree.  About half a minute
# on 2 cores, half of it pip installing numpy and scipy (benchmarks/CI_TIMES.md, 2026-12-07).
#
#   bash scripts/light_check.sh   PYTHON=python3.12: the bare environment's Python (default python3);
#                                 BUILD_PYTHON: the one that builds the wheel (default .venv's, else
#                                 PYTHON); PIP_CACHE_DIR=/tmp/empty: a cold pip cache
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
start=$(date +%s.%N)
# the environment's base interpreter, and the one that builds the wheel (.venv's has setuptools)
BASE_PYTHON="${PYTHON:-python3}"
if [ -z "${BUILD_PYTHON:-}" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then BUILD_PYTHON="$ROOT/.venv/bin/python"; else BUILD_PYTHON="$BASE_PYTHON"; fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/spectr-gbv-light.XXXXXX")"
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "light check: FAIL: $*" >&2; exit 1; }
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# 1. the wheel, from a copy of the tree
src="$work/src"
mkdir -p "$src" "$work/dist" "$work/run"
if git -C "$ROOT" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$ROOT" && git ls-files -z -co --exclude-standard \
     | while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done \
     | tar --null -T - -cf -) | tar -C "$src" -xf -
else
  (cd "$ROOT" && tar --exclude=./.venv --exclude=./.venv-vllm --exclude=./.git --exclude=./build -cf - .) | tar -C "$src" -xf -
fi
# pyproject.toml's build requirements already there: build with them (no download); else pip
# fetches them into an isolated build environment
isolation=()
if "$BUILD_PYTHON" -c "import setuptools, wheel; assert int(setuptools.__version__.split('.')[0]) >= 68" 2>/dev/null; then
  isolation=(--no-build-isolation)
fi
"$BUILD_PYTHON" -m pip wheel --no-deps ${isolation[@]+"${isolation[@]}"} -q -w "$work/dist" "$src" >"$work/build.log" 2>&1 \
  || { tail -20 "$work/build.log" >&2; fail "the wheel did not build"; }
wheels=("$work"/dist/*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || fail "expected one wheel in $work/dist"
wheel="${wheels[0]}"
size=$(stat -c %s "$wheel")
echo "wheel: $(basename "$wheel"), $size bytes ($(awk -v s="$size" 'BEGIN { printf "%.0f", s / 1024 }') KiB)"

# 2. a bare environment with the wheel and its base dependencies only
venv="$work/venv"
"$BASE_PYTHON" -m venv "$venv"
t0=$(date +%s.%N)
"$venv/bin/python" -m pip install -q "$wheel" >"$work/install.log" 2>&1 \
  || { tail -20 "$work/install.log" >&2; fail "pip install of the wheel failed"; }
installed=$("$venv/bin/python" -m pip list --format=freeze 2>/dev/null | tr '\n' ' ')
echo "install (the wheel + its base dependencies): $(elapsed "$t0") s; installed: $installed"
SG="$venv/bin/spectr-gbv"
cd "$work/run"  # outside the repository: the installed copy is the one imported

"$venv/bin/python" - "$venv" <<'EOF' || fail "the bare environment is not bare, or imports the checkout"
import importlib.util, os, sys
import spectr_gbv
heavy = [m for m in ("torch", "transformers", "cvxpy", "llama_cpp", "hypothesis") if importlib.util.find_spec(m)]
assert not heavy, f"installed in the bare environment: {heavy}"
assert os.path.realpath(spectr_gbv.__file__).startswith(os.path.realpath(sys.argv[1])), spectr_gbv.__file__
EOF

# 3. the light commands
"$SG" --help >/dev/null || fail "spectr-gbv --help"
"$SG" certify --help >/dev/null || fail "spectr-gbv certify --help"
out=$("$SG" exact --rule sd --K 1 --L 2 --draft "$ROOT/examples/toy_draft.json" \
      --target "$ROOT/examples/toy_target.json" 2>&1) || { echo "$out" >&2; fail "spectr-gbv exact"; }
grep -q "lossless at 1e-12" <<<"$out" || { echo "$out" >&2; fail "spectr-gbv exact: no 'lossless at 1e-12' line"; }
echo "exact: ok ($(grep -m1 'block efficiency' <<<"$out" | tr -s ' '))"
"$venv/bin/python" -c "import sys
from spectr_gbv.oracle.harness import certify_verifier
from spectr_gbv.oracle.lossless import certify_lossless
heavy = [m for m in ('torch', 'transformers', 'cvxpy') if m in sys.modules]
assert not heavy, heavy" || fail "importing certify_verifier and certify_lossless"
echo "oracle harness: certify_verifier, certify_lossless import without torch"

# 4. certify endpoint against a correct loopback server (bounded: it shuts itself down after 120 s)
cat >"$work/launch.py" <<'EOF'
import sys, time
from helpers.fake_deployment import serve
limit = float(sys.argv[1])
with serve(time_limit_s=limit) as (url, state):
    print(url, flush=True)
    time.sleep(limit)
EOF
PYTHONPATH="$ROOT/tests" "$venv/bin/python" "$work/launch.py" 120 >"$work/url" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do
  [ -s "$work/url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log" >&2; fail "the test server did not start"; }
  sleep 0.2
done
url=$(head -1 "$work/url")
[ -n "$url" ] || fail "the test server printed no URL in 20 s"
t0=$(date +%s.%N)
rc=0
"$SG" certify endpoint "$url" --reference self >"$work/endpoint.out" 2>"$work/endpoint.err" || rc=$?
if [ "$rc" != 0 ] || ! grep -qw PASS "$work/endpoint.out"; then
  cat "$work/endpoint.out" >&2; tail -20 "$work/endpoint.err" >&2
  fail "certify endpoint --reference self: exit $rc (expected 0 and a PASS line)"
fi
if grep -q Traceback "$work/endpoint.err"; then cat "$work/endpoint.err" >&2; fail "certify endpoint printed a traceback"; fi
echo "certify endpoint --reference self: $(grep -m1 -w PASS "$work/endpoint.out") ($(elapsed "$t0") s)"
kill "$server_pid" 2>/dev/null || true
wait "$server_pid" 2>/dev/null || true
server_pid=""

# 4b. certify log on a recorded log of the same chain (tests/helpers/recorded_logs.py): exit 0, PASS
PYTHONPATH="$ROOT/tests" "$venv/bin/python" -c "from helpers.recorded_logs import make_log
make_log('$work/traffic.jsonl', 200, seed=1)" || fail "writing a recorded log"
t0=$(date +%s.%N)
rc=0
"$SG" certify log "$work/traffic.jsonl" --vocab 64 >"$work/log.out" 2>"$work/log.err" || rc=$?
if [ "$rc" != 0 ] || ! grep -q "^verdict: PASS" "$work/log.out" || grep -q Traceback "$work/log.err"; then
  cat "$work/log.out" >&2; tail -20 "$work/log.err" >&2
  fail "certify log: exit $rc (expected 0 and a PASS line)"
fi
echo "certify log: $(head -1 "$work/log.out") ($(elapsed "$t0") s)"

# 5. a command that needs an extra: one line naming it, exit 2, no traceback
expect_one_line() {  # extra, command...
  local extra="$1"; shift
  local rc=0
  "$SG" "$@" >"$work/heavy.out" 2>"$work/heavy.err" || rc=$?
  if [ "$rc" != 2 ] || [ "$(wc -l <"$work/heavy.err")" != 1 ] || grep -q Traceback "$work/heavy.err" \
     || ! grep -qF "pip install 'spectr-gbv[$extra]'" "$work/heavy.err"; then
    cat "$work/heavy.err" >&2
    fail "spectr-gbv $*: expected exit 2 and one line naming spectr-gbv[$extra] (got exit $rc)"
  fi
  echo "spectr-gbv $*: $(cat "$work/heavy.err")"
}
expect_one_line torch certify verifiers --quick
expect_one_line oracle oracle --K 1 --L 2 --draft "$ROOT/examples/toy_draft.json" --target "$ROOT/examples/toy_target.json"

echo "total: $(elapsed "$start") s"
echo "light check: PASS"
