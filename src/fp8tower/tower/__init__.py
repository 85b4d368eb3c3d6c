"""A decode step's FP8 tower: build.py (random weights of a TowerSpec's shapes, Tower: run
eagerly or as a CUDA graph), timing.py (ms/step), bench.py (bench_tower), capture.py (the
tower's trace pair, through fp8tower.trace.capture). Nothing is re-exported here."""
