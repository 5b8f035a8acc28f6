#!/usr/bin/env bash
# The verl backend on real FSDP workers, on the GPU machine (run from the repo root there, with `.gpu` carried):
#   bash deploy/gpu/run_verl_check.sh
# Unpacks .gpu/verl-bundle.tar.xz (built here by deploy/gpu/prepare_verl_bundle.sh), installs its wheels into
# /tmp/site, points the tests at the carried tiny model, prints the GPU and versions, and runs
# tests/trainer/test_verl_backend_gpu.py. Everything goes to $OUT/verl_gpu.log; Ray's logs to $OUT/ray_logs.tgz on
# failure. Exits 0 only when the test passed (a skip counts as a failure).
set -uo pipefail

OUT=${OUT:-/tmp/verl-check-out}
BUNDLE=${BUNDLE:-.gpu/verl-bundle.tar.xz}
ROOT=/tmp/verl-bundle
SITE=/tmp/site
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-300}
mkdir -p "$OUT"
LOG=$OUT/verl_gpu.log

main() {
  date -u
  nvidia-smi || echo "nvidia-smi failed"
  [ -f "$BUNDLE" ] || { echo "$BUNDLE is missing: build it with deploy/gpu/prepare_verl_bundle.sh and carry .gpu"; return 2; }
  rm -rf "$ROOT" && mkdir -p "$ROOT" "$SITE"
  python3 -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" "$BUNDLE" "$ROOT" \
    || return 2
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
    "$ROOT"/wheels/*.whl || return 2
  export PYTHONPATH=$PWD:$SITE HARNESSRL_MODELS_DIR=$ROOT/models HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
    PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false RAY_USAGE_STATS_ENABLED=0 RAY_DEDUP_LOGS=0
  python3 - <<'EOF' || return 2
import importlib, importlib.util, sys
import torch
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
for name in ["verl", "ray", "tensordict", "transformers", "tokenizers", "pydantic", "peft", "accelerate", "datasets",
             "numpy", "pyarrow", "pytest"]:
    module = importlib.import_module(name)
    print(f"{name:13s} {getattr(module, '__version__', '?'):12s} {module.__file__}")
print("flash_attn importable:", importlib.util.find_spec("flash_attn") is not None)
for name in ["tests.trainer.test_verl_backend_gpu", "trainer.backends.verl", "trainer.backends.verl_loss",
             "verl.workers.engine_workers", "verl.workers.engine.fsdp.transformer_impl", "verl.workers.utils.losses"]:
    importlib.import_module(name)
from engines.model_cache import prepare_model
print("tiny model:", prepare_model("tiny"))
EOF
  timeout $((TEST_TIMEOUT_S + 30)) python3 -m pytest -x -q -m gpu tests/trainer/test_verl_backend_gpu.py \
    -p no:cacheprovider -rA -o timeout="$TEST_TIMEOUT_S"
}

main 2>&1 | tee "$LOG"
status=${PIPESTATUS[0]}
if [ "$status" -eq 0 ] && { ! grep -qE '\b[1-9][0-9]* passed' "$LOG" || grep -qE '\b[0-9]+ skipped' "$LOG"; }; then
  echo "pytest exited 0 without every test passed (skipped?): counted as a failure" | tee -a "$LOG"
  status=1
fi
if [ "$status" -ne 0 ] && [ -d /tmp/ray/session_latest/logs ]; then
  tar -czf "$OUT/ray_logs.tgz" -C /tmp/ray/session_latest logs 2>/dev/null
fi
echo "run_verl_check: exit $status" | tee -a "$LOG"
exit "$status"
