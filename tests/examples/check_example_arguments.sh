#!/usr/bin/env bash
# Command-line misuse of the examples (issue 16's user audit): a number out of range, an option given twice, or
# an output file (--save, --onnx, --profile, --checkpoint, --metrics) that cannot be created must end the run at
# once with exit status 2 and a message naming the option, before any data is read: a run that trains for
# minutes and only then fails to save has lost its work. Needs no data set (--data names a missing directory,
# which would be the first error without these checks). With PYTHON, the Python examples instead (in
# EXAMPLES_DIR; BPTRAIN_LIBRARY and PYTHONPATH set by the caller): the same checks, and a library error is one
# "error: ..." line with exit status 1, not a traceback.
# Usage: check_example_arguments.sh WORK_DIR BIN_DIR [PYTHON EXAMPLES_DIR]
set -uo pipefail
work=$1 bin=$2 python=${3:-}
rm -rf "$work" && mkdir -p "$work/out"
missing=$work/no-such-directory
failures=0
expect_status() { # expect_status STATUS DESCRIPTION PATTERN COMMAND...: that exit status and PATTERN in the output
  local want=$1 description=$2 pattern=$3 output rc
  shift 3
  output=$(timeout 60 "$@" --data "$missing" 2>&1)
  rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$pattern" <<< "$output" || grep -q Traceback <<< "$output"; then
    echo "FAIL: $description: exit $rc, want $want and '$pattern' in: $(tail -2 <<< "$output")"
    failures=$((failures + 1))
  else
    echo "ok: $description"
  fi
}
expect() { expect_status 2 "$@"; }
tiny_set() { # tiny_set DIR: IDX train (12) and t10k (6) sets of 2x2 images, labels 0..2
  python3 - "$1" <<'PY'
import os, struct, sys
os.makedirs(sys.argv[1])
for split, count in (("train", 12), ("t10k", 6)):
    with open(os.path.join(sys.argv[1], split + "-images-idx3-ubyte"), "wb") as file:
        file.write(struct.pack(">IIII", 0x803, count, 2, 2) + bytes(range(count * 4)))
    with open(os.path.join(sys.argv[1], split + "-labels-idx1-ubyte"), "wb") as file:
        file.write(struct.pack(">II", 0x801, count) + bytes(n % 3 for n in range(count)))
PY
}

if [ -n "$python" ]; then
  examples=$4
  for example in mnist_mlp mnist_cnn; do
    expect "$example.py: --save into a missing directory" "--save '$missing/m.ckpt': cannot create" \
      "$python" "$examples/$example.py" --save "$missing/m.ckpt"
    expect "$example.py: --epochs 0" "must be a positive integer" "$python" "$examples/$example.py" --epochs 0
    expect "$example.py: --save with --eval" "--save and --eval exclude each other" \
      "$python" "$examples/$example.py" --eval "$work/m.ckpt" --save "$work/out/m.ckpt"
    expect_status 1 "$example.py: a library error" "error: IDX directory '$missing'" \
      "$python" "$examples/$example.py"
  done
  # A misspelt option names the one meant, as in the C examples (issue 29); a far one gets no guess.
  expect "mnist_cnn.py: --epcohs" "unknown argument '--epcohs'; did you mean --epochs?" \
    "$python" "$examples/mnist_cnn.py" --epcohs 3
  expect "mnist_mlp.py: --bacth" "unknown argument '--bacth'; did you mean --batch?" \
    "$python" "$examples/mnist_mlp.py" --bacth 3
  expect "mnist_mlp.py: --frobnicate" "unknown argument '--frobnicate'" "$python" "$examples/mnist_mlp.py" --frobnicate
  if timeout 60 "$python" "$examples/mnist_mlp.py" --frobnicate 2>&1 | grep -q "did you mean"; then
    echo "FAIL: mnist_mlp.py: --frobnicate got a guess"; failures=$((failures + 1))
  fi
  expect "mnist_mlp.py: --epoch is still an abbreviation" "must be a positive integer" \
    "$python" "$examples/mnist_mlp.py" --epoch 0
  expect "mnist_mlp.py: an empty --save" "--save '': cannot create" "$python" "$examples/mnist_mlp.py" --save ""
  expect "mnist_mlp.py: --save onto a device" "--save '/dev/null': is not a regular file" \
    "$python" "$examples/mnist_mlp.py" --save /dev/null
  expect_status 1 "mnist_mlp.py: --metrics onto a device passes the check" "error: IDX directory" \
    "$python" "$examples/mnist_mlp.py" --metrics /dev/null
  expect "mnist_cnn.py: --onnx into a missing directory" "--onnx '$missing/m.onnx': cannot create" \
    "$python" "$examples/mnist_cnn.py" --onnx "$missing/m.onnx"
  expect "mnist_mlp.py: --profile into a missing directory" "--profile '$missing/t.json': cannot create" \
    "$python" "$examples/mnist_mlp.py" --profile "$missing/t.json"
  expect "mnist_cnn.py: --plot into a missing directory" "--plot '$missing/p.png': cannot create" \
    "$python" "$examples/mnist_cnn.py" --plot "$missing/p.png"
  # A corrupt label (200 among 0..2) is refused naming the label file, not trained as a 201-class model.
  "$python" -c '
import os, struct, sys
os.makedirs(sys.argv[1])
for split, count in (("train", 12), ("t10k", 6)):
    labels = [n % 3 for n in range(count)]
    labels[4] = 200 if split == "train" else labels[4]
    with open(os.path.join(sys.argv[1], split + "-images-idx3-ubyte"), "wb") as file:
        file.write(struct.pack(">IIII", 0x803, count, 2, 2) + bytes(range(count * 4)))
    with open(os.path.join(sys.argv[1], split + "-labels-idx1-ubyte"), "wb") as file:
        file.write(struct.pack(">II", 0x801, count) + bytes(labels))
' "$work/labels"
  output=$(timeout 60 "$python" "$examples/mnist_mlp.py" --data "$work/labels" --epochs 1 --batch 4 2>&1)
  if [ $? -ne 1 ] || ! grep -q "train-labels-idx1-ubyte" <<< "$output"; then
    echo "FAIL: mnist_mlp.py: a corrupt label: $(tail -2 <<< "$output")"; failures=$((failures + 1))
  else
    echo "ok: mnist_mlp.py: a corrupt label is refused"
  fi
  expect_status 1 "mnist_mlp.py: a writable --save passes, leaving no file" "error: IDX directory" \
    "$python" "$examples/mnist_mlp.py" --save "$work/out/m.ckpt"
  [ -z "$(ls -A "$work/out")" ] || { echo "FAIL: the probe left $(ls -A "$work/out")"; failures=$((failures + 1)); }
  [ $failures -eq 0 ] || { echo "$failures failures"; exit 1; }
  echo "Python example arguments OK"
  exit 0
fi

for example in mnist_mlp mnist_mlp_cpp; do
  [ -x "$bin/$example" ] || continue
  expect "$example: --epochs beyond long" "--epochs 99999999999999999999 is out of range" \
    "$bin/$example" --epochs 99999999999999999999
  expect "$example: --threads beyond int" "--threads" "$bin/$example" --threads 4294967297
  expect "$example: an option twice" "--epochs is given more than once" "$bin/$example" --epochs 1 --epochs 2
  expect "$example: --epoch" "unknown argument '--epoch'; did you mean --epochs?" "$bin/$example" --epoch 3
  expect "$example: --save with --eval" "--save and --eval exclude each other" \
    "$bin/$example" --eval "$work/m.ckpt" --save "$work/out/m.ckpt"
  expect "$example: --save into a missing directory" "--save '$missing/model.ckpt': cannot create" \
    "$bin/$example" --save "$missing/model.ckpt"
  expect "$example: --metrics into a missing directory" "--metrics '$missing/m.csv': cannot create" \
    "$bin/$example" --metrics "$missing/m.csv"
  # The library writes regular files only (it would refuse /dev/null after the run); the examples open the
  # metrics CSV themselves, so a device is fine there.
  expect "$example: --save onto a device" "--save '/dev/null': is not a regular file" "$bin/$example" --save /dev/null
  expect_status 1 "$example: --metrics onto a device passes the check" "IDX directory '$missing'" \
    "$bin/$example" --metrics /dev/null
done
expect "mnist_mlp: --save onto a directory" "is a directory" "$bin/mnist_mlp" --save "$work/out"
# A misspelt option names the one meant (issue 29); one far from every option gets no guess.
expect "mnist_cnn: --bacth" "did you mean --batch?" "$bin/mnist_cnn" --bacth 3
expect "mnist_mlp: --frobnicate" "unknown argument '--frobnicate'" "$bin/mnist_mlp" --frobnicate
if timeout 60 "$bin/mnist_mlp" --frobnicate 2>&1 | grep -q "did you mean"; then
  echo "FAIL: --frobnicate got a guess"; failures=$((failures + 1))
fi
# --backend on mnist_cnn as on the other training examples: an unknown one fails naming it.
expect_status 1 "mnist_cnn: --backend is an option" "nosuch" "$bin/mnist_cnn" --backend nosuch
# ... and on the rest (issue 29), with the library's message, before the data is read.
for example in ddp_mnist speculative_mnist mnist_mlp_cpp; do
  expect_status 1 "$example: --backend is an option" "unknown backend 'nosuch'" "$bin/$example" --backend nosuch
done
expect_status 1 "checkpoint_resume: --backend is an option" "unknown backend 'nosuch'" \
  "$bin/checkpoint_resume" --checkpoint "$work/out/c.ckpt" --backend nosuch
expect "speculative_mnist: --backend with --skip-cpu" "which --skip-cpu skips" \
  "$bin/speculative_mnist" --skip-cpu --backend cpu
expect "speculative_mnist: --backend fpga-sim" "the fpga-sim runs are made anyway" \
  "$bin/speculative_mnist" --backend fpga-sim
expect "mnist_mlp: --onnx into a missing directory" "--onnx '$missing/m.onnx': cannot create" \
  "$bin/mnist_mlp" --onnx "$missing/m.onnx"
expect "mnist_mlp: --profile into a missing directory" "--profile '$missing/t.json': cannot create" \
  "$bin/mnist_mlp" --profile "$missing/t.json"
for example in mnist_cnn resnet; do
  expect "$example: --save into a missing directory" "--save '$missing/m.ckpt': cannot create" \
    "$bin/$example" --save "$missing/m.ckpt"
  expect "$example: --onnx into a missing directory" "--onnx '$missing/m.onnx': cannot create" \
    "$bin/$example" --onnx "$missing/m.onnx"
done
expect "resnet: --fold without --eval" "--fold works with --eval FILE" "$bin/resnet" --fold
expect "speculative_mnist: nothing to run" "leave nothing to run" "$bin/speculative_mnist" --skip-cpu --skip-fpga
expect "speculative_mnist: --fpga-fixed with --skip-fpga" "which --skip-fpga skips" \
  "$bin/speculative_mnist" --skip-fpga --fpga-fixed 16:6
expect "speculative_mnist: unknown --model" "takes mlp or lenet" "$bin/speculative_mnist" --model resnet
expect "mnist_precision: --all with --dtype" "--all runs every configuration" "$bin/mnist_precision" --all --dtype f16
expect "mnist_bsn: --momentum without --sgd" "--momentum is for --sgd" "$bin/mnist_bsn" --momentum 0.5
expect "mnist_bsn: a negative --eval-samples" "--eval-samples >= 0" "$bin/mnist_bsn" --eval-samples -5
expect "checkpoint_resume: --checkpoint into a missing directory" "--checkpoint '$missing/c.ckpt': cannot create" \
  "$bin/checkpoint_resume" --checkpoint "$missing/c.ckpt"
expect "ddp_mnist: a negative --bucket-kb" "--bucket-kb" "$bin/ddp_mnist" --bucket-kb -1  # was 2^64 - 1024 bytes
expect "ddp_mnist: --accumulate beyond --batch" "--accumulate" "$bin/ddp_mnist" --accumulate 9223372036854775807
expect "checkpoint_resume: a negative --stop-after is named" "--stop-after and --save-every >= 0" \
  "$bin/checkpoint_resume" --checkpoint "$work/out/c.ckpt" --stop-after -1
expect "mnist_bsn: --threads beyond int" "--threads 4294967297 is out of range" "$bin/mnist_bsn" --threads 4294967297

# A batch as large as the training set trains one step per epoch: the examples with their own training loops
# say so once a run, on stderr, as the bpt_train ones do (issue 29); a smaller batch gets no warning. Twelve
# 2x2 images of three classes, so that each run takes a moment.
tiny_set "$work/tiny"
whole="warning: the batch holds the whole training set (12 samples)"
check_whole_batch() { # check_whole_batch DESCRIPTION WARNINGS COMMAND...: that many warnings, exit 0
  local description=$1 want=$2 output rc
  shift 2
  output=$(timeout 120 "$@" 2>&1 > /dev/null)
  rc=$?
  if [ $rc -ne 0 ] && [ "$1" = "$bin/ddp_mnist" ] && grep -qi "mpi" <<< "$output"; then
    echo "note: $description: ddp_mnist cannot run one MPI rank here: $(tail -1 <<< "$output")"
  elif [ $rc -ne 0 ] || [ "$(grep -cF -- "$whole" <<< "$output")" -ne "$want" ]; then
    echo "FAIL: $description: exit $rc, want $want '$whole' in: $(tail -3 <<< "$output")"
    failures=$((failures + 1))
  else
    echo "ok: $description"
  fi
}
for example in ddp_mnist speculative_mnist; do
  [ -x "$bin/$example" ] || continue
  extra=(--threads 1)
  [ $example = speculative_mnist ] && extra=(--skip-fpga --thresholds 0,0.1 --train-samples 12)
  check_whole_batch "$example: --batch 12 of 12 samples warns once" 1 \
    "$bin/$example" --data "$work/tiny" --epochs 2 --batch 12 "${extra[@]}"
  check_whole_batch "$example: --batch 4 of 12 samples does not warn" 0 \
    "$bin/$example" --data "$work/tiny" --epochs 2 --batch 4 "${extra[@]}"
done
# Only whole global batches train, so a larger batch than the set would have run epochs without a step.
if [ -x "$bin/ddp_mnist" ]; then
  output=$(timeout 120 "$bin/ddp_mnist" --data "$work/tiny" --batch 24 --threads 1 2>&1)
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 2 ] && grep -qi "mpi" <<< "$output"; then
    echo "note: ddp_mnist cannot run one MPI rank here: $(tail -1 <<< "$output")"
  elif [ $rc -ne 2 ] || ! grep -qF -- "--batch 24 is larger than the 12 training samples" <<< "$output"; then
    echo "FAIL: ddp_mnist: --batch beyond the training set: exit $rc: $(tail -2 <<< "$output")"
    failures=$((failures + 1))
  else
    echo "ok: ddp_mnist: --batch beyond the training set"
  fi
fi

# A path that can be created passes the check and leaves nothing behind (the run then fails on the data).
output=$(timeout 60 "$bin/mnist_mlp" --save "$work/out/model.ckpt" --data "$missing" 2>&1)
if ! grep -q "IDX directory '$missing'" <<< "$output" || [ -n "$(ls -A "$work/out")" ]; then
  echo "FAIL: a writable --save: $(tail -2 <<< "$output"); left: $(ls -A "$work/out")"
  failures=$((failures + 1))
else
  echo "ok: a writable --save passes and leaves no file"
fi
[ $failures -eq 0 ] || { echo "$failures failures"; exit 1; }
echo "example arguments OK"
