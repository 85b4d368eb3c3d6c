# session 16 call 6: GPU tests, split-K partial mask A/B, traces (run from the repo root on the device)
set -u
O=$OUT/c6; mkdir -p $O
. benchmarks/device_wheels.sh; install_wheels .gpu/run $O/status.txt
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
mkdir -p /tmp/tc && cp -r .gpu/run/cache/. /tmp/tc/
FP8TOWER_CACHE_DIR=/tmp/tc timeout 130 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 120 -rf tests --ignore tests/test_nonfinite.py > $O/tests.log 2>&1
echo "tests rc=$?" | tee -a $O/status.txt; tail -3 $O/tests.log; grep -E "^FAILED" $O/tests.log | head
OUT=$O timeout 200 env OLD_SRC=.gpu/run/old/src CACHE_JSON=.gpu/run/tuning_s16.json TOWER_SCHEMES=channel_token,block128 TOWER_M=1,8 bash benchmarks/ab_tower.sh > $O/ab.log 2>&1
echo "ab rc=$?" | tee -a $O/status.txt
python3 -c "
import json,glob
for f in sorted(glob.glob('$O/ab/tower_*.json')):
    d=json.load(open(f)); print(f.split('/')[-1], round(d['read_ceiling_gbps']), [(r['scheme'], r['m'], round(r['ms_per_step'],4), r.get('chosen')) for r in d['rows']])
"
for s in per_tensor channel_token; do
  FP8TOWER_CACHE_DIR=/tmp/ab_after timeout 90 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto --m 1 --scheme $s --out $O/trace_$s > $O/trace_$s.log 2>&1
  FP8TOWER_CACHE_DIR=/tmp/ab_after timeout 40 python3 -m fp8tower trace attribute $O/trace_$s --json $O/${s}_attr.json > $O/${s}_attr.log 2>&1
  echo "trace $s rc=$?" | tee -a $O/status.txt; tail -22 $O/${s}_attr.log
done
tar -czf $OUT/c6.tgz --exclude=trace_per_tensor --exclude=trace_channel_token -C $OUT c6 && rm -rf $O
