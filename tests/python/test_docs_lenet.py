"""docs/python.md's "## A model" snippet, run as written but on a 512-sample slice of Fashion-MNIST, shares
its checkpoint with the C example both ways: mnist_cnn --eval reads the snippet's lenet.ckpt and reports the
accuracy the snippet's model measures, and the snippet's model loads what mnist_cnn --save wrote (issue 29).

Run by CTest (check_python_docs_lenet) with BPT_MNIST_CNN naming the built example; skips (77) without NumPy
or the data set (apt-get install dataset-fashion-mnist). A few seconds.
"""
import os
import re
import subprocess
import sys
import tempfile

import support  # noqa: F401 (the binding on sys.path, the NumPy skip)

DATA = "/usr/share/datasets/fashion-mnist"
DOCS = os.path.join(support.REPOSITORY, "docs", "python.md")


def snippet():
    """The first ```python block under "## A model"."""
    with open(DOCS) as file:
        text = file.read()
    section = text.split("\n## A model\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0] + "\n"


def run(command, directory):
    result = subprocess.run(command, cwd=directory, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=600)
    return result.returncode, result.stdout.decode(errors="replace")


def main():
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        print("SKIP: no Fashion-MNIST in %s (apt-get install dataset-fashion-mnist)" % DATA)
        return 77
    with tempfile.TemporaryDirectory() as directory:
        data = os.path.join(directory, "slice")
        subprocess.run(["bash", os.path.join(support.REPOSITORY, "scripts", "make-data-slice.sh"), data, "512"],
                       check=True)
        c_example = [os.environ["BPT_MNIST_CNN"], "--data", data, "--threads", "2"]
        status, output = run(c_example + ["--epochs", "1", "--save", "c.ckpt"], directory)
        assert status == 0, output
        # The snippet as written, on the slice, then two lines inside its `with`: the accuracy it measures
        # and a load of the C example's checkpoint.
        code = snippet()
        assert DATA in code and 'model.save("lenet.ckpt"' in code, code
        code = code.replace(DATA, data).replace("threads=0", "threads=2")
        code += ('    print("snippet test accuracy %.2f%%" % (100 * model.evaluate(test)["accuracy"]))\n'
                 '    print("loaded from mnist_cnn: %d" % len(model.load("c.ckpt").loaded))\n')
        with open(os.path.join(directory, "snippet.py"), "w") as file:
            file.write(code)
        status, output = run([sys.executable, "snippet.py"], directory)
        print(output)
        assert status == 0, output
        python_accuracy = float(re.search(r"snippet test accuracy ([0-9.]+)%", output).group(1))
        loaded = int(re.search(r"loaded from mnist_cnn: ([0-9]+)", output).group(1))
        assert loaded == 10, output  # LeNet-5's five weights and five biases

        status, output = run(c_example + ["--eval", "lenet.ckpt"], directory)
        print(output)
        assert status == 0, output
        c_accuracy = float(re.findall(r"test accuracy ([0-9.]+)%", output)[-1])
        assert abs(c_accuracy - python_accuracy) < 0.015, (c_accuracy, python_accuracy)
        print("PASS: the docs' LeNet and mnist_cnn read each other's checkpoints (%.2f%% both)" % c_accuracy)
    return 0


if __name__ == "__main__":
    sys.exit(main())
