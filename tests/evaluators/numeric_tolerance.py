# Numeric answers within a relative tolerance (math, statistics, decimal).
import json, math, statistics, sys
from decimal import Decimal, getcontext

getcontext().prec = 28
data = json.load(sys.stdin)
ok = []
for c in data["cases"]:
    try:
        got = float(Decimal(str(c["answer"]).strip()))
    except Exception:
        ok.append(0.0)
        continue
    ok.append(1.0 if math.isclose(got, float(c["expected"]), rel_tol=1e-6) else 0.0)
print(json.dumps({"evaluator": "numeric_tolerance", "score": statistics.fmean(ok),
                  "stdev": round(statistics.pstdev(ok), 6)}))
