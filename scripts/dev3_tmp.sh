mkdir -p /tmp/site && tar xJf .devdeps/site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_DISABLE_USAGE_STATS=1
show() { grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); c=r.get('cand',{}); f=r.get('ref',{})
    print(r['mode'], r['rung'], r['true'], round(r['speedup'],3), 'k', r['k'], 'rounds', r['rounds'], 'ref calls', f.get('rank_calls'), 'cand calls', c.get('rank_calls'), 'blanks', f.get('blank'), c.get('blank'), 'time', f.get('time'), c.get('time'))
"; }
echo "== copy eager default"; timeout 60 python3 scripts/bench_ladder.py --modes eager --ns 1 --ms '' --reps 2 2>&1 | show
echo "== copy eager pinned"; PKB_GPU_RANK_CORES=2 timeout 60 python3 scripts/bench_ladder.py --modes eager --ns 1 --ms '' --reps 2 2>&1 | show
echo "== copy eager no touch"; timeout 60 python3 scripts/bench_ladder.py --modes eager --ns 1 --ms '' --reps 2 --set touch_devices=false 2>&1 | show
echo "== copy eager 64 MiB"; timeout 70 python3 scripts/bench_ladder.py --modes eager --ns 1 --ms '' --reps 2 --set 'size={"numel": 16777216}' 2>&1 | show
