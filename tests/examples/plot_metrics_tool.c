/* The examples' --plot on its own: draws a metrics CSV with example_plot_metrics() (examples/common), so that
 * tests/examples/check_plot.py can check the C plot and Python's bptrain.plot_metrics on the same files.
 * Usage: plot_metrics_tool CSV PNG; exits with the helper's status. */
#include <stdio.h>

#include "example_metrics.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: plot_metrics_tool CSV PNG\n");
    return 2;
  }
  return example_plot_metrics(argv[1], argv[2], "plot check");
}
