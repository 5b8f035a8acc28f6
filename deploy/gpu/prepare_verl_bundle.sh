#!/usr/bin/env bash
# Builds .gpu/verl-bundle.tar.xz (run here, from the repo root): the cp312 wheels the GPU machine lacks for
# tests/trainer/test_verl_backend_gpu.py, plus the prepared tiny model, in one xz tarball under the 64 MiB carry limit.
# Wheels are repacked uncompressed so xz compresses them (ray's Java jars, UI and libraries we never import are left
# out: 79 MiB -> 19 MiB). Usage: bash deploy/gpu/prepare_verl_bundle.sh   (then carry `.gpu`; see deploy/gpu/README.md)
set -euo pipefail

BUILD=${BUILD:-/tmp/verl-bundle-build}
DEST=${DEST:-.gpu/verl-bundle.tar.xz}
PY=${PY:-.venv/bin/python}
PY_VERSION=${PY_VERSION:-3.12}  # the GPU machine's python3; 3.11 builds a bundle to rehearse the check on this machine
XZ_LEVEL=${XZ_LEVEL:-9}
# verl 0.9.1 --no-deps plus what its worker path and our modules import that the machine's image lacks, or has at a
# version outside the range required here (transformers <5.11 for verl, tokenizers <=0.23.0 for transformers 5.10,
# typing-extensions >=4.16 for pydantic 2.14). fastapi 0.140: from 0.149 on it imports opentelemetry.
WHEELS=(
  ray==2.60.0 verl==0.9.1 tensordict==0.10.0 pyvers==0.1.0 importlib-metadata==10.2.0 orjson==3.13.0
  omegaconf==2.3.1 codetiming==1.4.0 transformers==5.10.4 tokenizers==0.22.2 regex==2026.11.19 peft==0.21.2
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 uvicorn==0.54.0 fastapi==0.140.0 starlette==1.10.0
)
SDIST_ONLY=(antlr4-python3-runtime==4.9.3)  # pure Python, published as an sdist only: built into a wheel here
RAY_DROP=(ray/jars/ ray/dashboard/client/build/ ray/rllib/ ray/serve/ ray/data/ ray/tune/ ray/train/ ray/llm/)

rm -rf "$BUILD" && mkdir -p "$BUILD/dl" "$BUILD/stage/wheels" "$BUILD/stage/models"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$BUILD/dl" "${WHEELS[@]}"
python3 -m pip wheel -q --no-deps -w "$BUILD/dl" "${SDIST_ONLY[@]}"

for wheel in "$BUILD"/dl/*.whl; do
  drops=()
  case $(basename "$wheel") in ray-*) for p in "${RAY_DROP[@]}"; do drops+=(--drop "$p"); done ;; esac
  python3 deploy/gpu/strip_wheel.py --stored "${drops[@]}" "$wheel" "$BUILD/stage/wheels/$(basename "$wheel")"
done

tiny=$("$PY" -c "from engines.model_cache import prepare_model; print(prepare_model('tiny'))")
cp -r "$tiny" "$BUILD/stage/models/tiny"
chmod -R a+rX "$BUILD/stage/models"

mkdir -p "$(dirname "$DEST")"
tar -C "$BUILD/stage" -cf - wheels models | xz "-$XZ_LEVEL" -T0 > "$DEST.tmp" && mv "$DEST.tmp" "$DEST"
ls -l "$DEST"
echo "wheels: $(ls "$BUILD/stage/wheels" | wc -l); bundle $(du -m "$DEST" | cut -f1) MiB; carry limit 64 MiB in all"
