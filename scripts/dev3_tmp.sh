mkdir -p /tmp/site && tar xJf .devdeps/site.tar.xz -C /tmp/site
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 RAY_DISABLE_USAGE_STATS=1
show() { grep '^{' | python3 -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); c=r.get('cand',{}); f=r.get('ref',{})
    print(r['mode'], r['rung'], r['true'], round(r['speedup'],3), 'k', r['k'], 'rounds', r['rounds'], 'ref calls', f.get('rank_calls'), 'cand calls', c.get('rank_calls'), 'blanks', f.get('blank'), c.get('blank'), 'time', f.get('time'), c.get('time'))
"; }
for v in '' '--set isolation="none"' '--set zygote=false'; do
  echo "== copy eager $v"
  timeout 100 python3 scripts/bench_ladder.py --modes eager --ns 1 --ms '' --reps 2 $v --out $OUT/copy_$(echo $v | tr -dc a-z).json 2>&1 | show
done
echo "== ladder eager"
timeout 150 python3 scripts/bench_ladder.py --modes eager --ns 8,4,2,1 --ms 2,4 --out $OUT/ladder_eager.json 2>&1 | show
echo "== ladder graph"
timeout 150 python3 scripts/bench_ladder.py --modes graph --ns 8,4,2,1 --ms 2,4 --out $OUT/ladder_graph.json 2>&1 | show
