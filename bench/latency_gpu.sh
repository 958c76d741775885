#!/usr/bin/env bash
# Issue 7 on a GPU: `guardscope bench` on the full-size seed corpus, then the independent
# plain-PyTorch script on the same corpus, then the comparison. From the repository root:
#
#   bash bench/latency_gpu.sh OUT            # all of it (about 8-9 minutes on an H200)
#   bash bench/latency_gpu.sh OUT bench      # analyze + emit-warmup + guardscope bench (about 6 min)
#   bash bench/latency_gpu.sh OUT plain      # bench/plain_bench.py, then the comparison (about 2.5 min;
#                                            # it takes WORK/bench.json when OUT lacks bench.json)
#
# Writes OUT/bench.txt, bench.json, report.html, fixes.json, plain.txt, plain.json, compare.txt
# and OUT/steps.txt (seconds per step). CORPUS (default /tmp/gnn-full, generated when missing),
# WORK (default /tmp/guardscope-latency: the analysis folder), TIMEOUT (seconds per bench
# strategy, default 240) and DEVICE (default cuda; cpu checks the script on a small corpus) can be
# set in the environment.
set -euo pipefail
OUT=${1:?usage: bash bench/latency_gpu.sh OUT [all|bench|plain]}
STAGE=${2:-all}
CORPUS=${CORPUS:-/tmp/gnn-full}
WORK=${WORK:-/tmp/guardscope-latency}
DEVICE=${DEVICE:-cuda}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"

step() {  # step NAME COMMAND...: run it, append its wall seconds to OUT/steps.txt
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "$name $((SECONDS - started)) s" | tee -a "$OUT/steps.txt"
}

[ -f "$CORPUS/corpus.json" ] || step generate python -m samples.gnn.generate "$CORPUS"
if [ "$STAGE" != plain ]; then
  step analyze python -m guardscope.cli analyze "$CORPUS" --out "$WORK" --device "$DEVICE" --force -q
  step emit-warmup python -m guardscope.cli emit-warmup "$WORK"
  step bench bash -c "set -o pipefail; python -m guardscope.cli bench '$WORK' --device '$DEVICE' --timeout '${TIMEOUT:-240}' | tee '$OUT/bench.txt'"
  cp "$WORK/bench.json" "$WORK/report.html" "$WORK/fixes.json" "$OUT/"
fi
if [ "$STAGE" = plain ] && [ ! -f "$OUT/bench.json" ] && [ -f "$WORK/bench.json" ]; then
  cp "$WORK/bench.json" "$OUT/"  # the bench stage's result, when this machine still has it
fi
if [ "$STAGE" != bench ]; then
  step plain bash -c "set -o pipefail; python bench/plain_bench.py '$CORPUS' --device '$DEVICE' --json '$OUT/plain.json' | tee '$OUT/plain.txt'"
fi
if [ -f "$OUT/bench.json" ] && [ -f "$OUT/plain.json" ]; then
  python bench/compare_bench.py "$OUT/bench.json" "$OUT/plain.json" | tee "$OUT/compare.txt" || true
fi
