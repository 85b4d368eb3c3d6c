#!/usr/bin/env bash
# Session 22, device call 5: call 4 again, on the same (still warm) machine, outputs in call5/.
sed 's#O=$FINAL/call4#O=$FINAL/call5#' benchmarks/results/standin_H200_2026-12-04/call4.sh > /tmp/call5.sh
bash /tmp/call5.sh
