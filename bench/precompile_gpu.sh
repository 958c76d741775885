#!/usr/bin/env bash
# Issue 50 on a GPU: the full-size seed's warmup set up three ways in one lease — compiled from
# scratch, from its compile-cache bundle, and from its precompiled graphs — each in a fresh process
# with empty caches (guardscope bench), and the precompiled graphs proven by verify. From the
# repository root:
#
#   bash bench/precompile_gpu.sh OUT
#
# Writes OUT/api.txt (what the installed torch offers), OUT/steps.txt (seconds per step),
# OUT/precompile.txt, OUT/bench.txt, OUT/verify.txt and the JSON documents. A torch without the
# AOT compile API stops after api.txt, saying so. CORPUS (default /tmp/gnn-full, generated when
# missing), WORK (default /tmp/guardscope-precompile), DEVICE (default cuda) can be set.
set -euo pipefail
OUT=${1:?usage: bash bench/precompile_gpu.sh OUT}
CORPUS=${CORPUS:-/tmp/gnn-full}
WORK=${WORK:-/tmp/guardscope-precompile}
DEVICE=${DEVICE:-cuda}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$OUT"

step() {  # step NAME COMMAND...: run it, append its wall seconds to OUT/steps.txt
  local name=$1 started=$SECONDS
  shift
  "$@"
  echo "$name $((SECONDS - started)) s" | tee -a "$OUT/steps.txt"
}

python -c "import torch; from guardscope.torch_compat import aot_compile_missing as m; \
print('torch', torch.__version__, '|', m() or 'AOT compile of a module: available')" | tee "$OUT/api.txt"
grep -q "available" "$OUT/api.txt" || exit 0
[ -f "$CORPUS/corpus.json" ] || step generate python -m samples.gnn.generate "$CORPUS"
step analyze python -m guardscope.cli analyze "$CORPUS" --out "$WORK" --device "$DEVICE" --force -q
step emit-warmup python -m guardscope.cli emit-warmup "$WORK"
step bundle python -m guardscope.cli bundle "$WORK" --artifact warmup --device "$DEVICE"
step precompile bash -c "set -o pipefail; python -m guardscope.cli precompile '$WORK' --device '$DEVICE' | tee '$OUT/precompile.txt'"
step bench bash -c "set -o pipefail; python -m guardscope.cli bench '$WORK' --device '$DEVICE' --strategy eager \
  --strategy compile --strategy warmup --strategy precompiled --timeout 600 | tee '$OUT/bench.txt'"
step verify bash -c "set -o pipefail; python -m guardscope.cli verify '$WORK' --artifact warmup | tee '$OUT/verify.txt'"
cp "$WORK/bench.json" "$WORK/verification.json" "$WORK/warmup.precompiled.json" "$WORK/warmup.compile-cache.json" "$OUT/"
