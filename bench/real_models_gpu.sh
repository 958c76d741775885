#!/usr/bin/env bash
# Issue 14 on a GPU (torch 2.11 on the H200): the real-model checks that need CUDA or a second
# torch version. From the repository root:
#
#   bash bench/real_models_gpu.sh OUT [fixtures|fidelity|bench|tests]...   (default: all four)
#
#   fixtures  record the structured-trace fixtures of this torch (tests/fixtures/record_trace.py)
#             into OUT/traces-<torch>.tgz
#   fidelity  for the PyG model, the .item() model and GPT-2 called directly (FIDELITY_MODELS): the default analysis (eager backend, cuda)
#             and `guardscope fidelity` (inductor, cuda); OUT/fidelity-<model>.txt and .json
#   bench     GPT-2 called directly: analyze, emit-warmup, verify and `guardscope bench` on cuda;
#             OUT/bench-gpt2.txt, bench-gpt2.json
#   tests     the real-model, capture and classification tests on this torch; OUT/tests.txt
#
# WORK (default /tmp/guardscope-real) holds corpora and analyses; COUNT (default 120) requests
# per corpus; TIMEOUT (default 300) seconds per bench strategy.
set -uo pipefail
OUT=${1:?usage: bash bench/real_models_gpu.sh OUT [fixtures|fidelity|bench|tests]...}
shift
STAGES=${*:-fixtures fidelity bench tests}
WORK=${WORK:-/tmp/guardscope-real}
COUNT=${COUNT:-120}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # absolute: the fidelity child runs elsewhere
# Cache compiled bytecode (the H200 image sets PYTHONDONTWRITEBYTECODE and ships torch without it:
# every process would spend seconds compiling torch's modules again).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-/tmp/pyc}
mkdir -p "$OUT" "$WORK"
TORCH=$(python -c "import torch; print(torch.__version__.split('+')[0])")

step() {  # step NAME COMMAND...: run it, log its output and wall seconds
  local name=$1 started=$SECONDS
  shift
  echo "== $name" | tee -a "$OUT/steps.txt"
  "$@" 2>&1 | grep -v "^[WVI][0-9]\{4\} " > "$OUT/$name.txt"
  echo "$name: exit ${PIPESTATUS[0]}, $((SECONDS - started)) s" | tee -a "$OUT/steps.txt"
}

for stage in $STAGES; do
  case $stage in
    fixtures)
      step record python tests/fixtures/record_trace.py "$WORK/traces"
      tar czf "$OUT/traces-$TORCH.tgz" -C "$WORK/traces" "torch-$TORCH" ;;
    fidelity)
      for model in ${FIDELITY_MODELS:-gcn gated gpt2}; do
        python -m tests.real_models "$model" "$WORK/c-$model" --count "$COUNT" > /dev/null
        step "analyze-$model" python -m guardscope.cli analyze "$WORK/c-$model" --out "$WORK/o-$model" --device cuda --force -q
        step "fidelity-$model" python -m guardscope.cli fidelity "$WORK/o-$model" --device cuda
        cp "$WORK/o-$model/fidelity.json" "$OUT/fidelity-$model.json" 2>/dev/null
      done ;;
    bench)
      python -m tests.real_models gpt2 "$WORK/c-gpt2" --count "$COUNT" > /dev/null
      step analyze-gpt2 python -m guardscope.cli analyze "$WORK/c-gpt2" --out "$WORK/o-gpt2" --device cuda --force -q
      step emit-gpt2 python -m guardscope.cli emit-warmup "$WORK/o-gpt2"
      step verify-gpt2 python -m guardscope.cli verify "$WORK/o-gpt2" --no-bundle
      step bench-gpt2 python -m guardscope.cli bench "$WORK/o-gpt2" --device cuda --timeout "${TIMEOUT:-300}"
      cp "$WORK/o-gpt2/bench.json" "$OUT/bench-gpt2.json" 2>/dev/null ;;
    tests)
      step tests python -m pytest -q -p no:cacheprovider -n 8 tests/integration/test_real_models.py \
        tests/*/test_export.py tests/*/test_capture.py tests/unit/test_classify.py tests/unit/test_binding.py ;;
  esac
done
