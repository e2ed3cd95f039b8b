# Score cases in parallel with a multiprocessing pool.
import json, multiprocessing, sys

def score(c):
    return 1.0 if c["answer"].strip() == c["expected"].strip() else 0.0

if __name__ == "__main__":
    data = json.load(sys.stdin)
    with multiprocessing.Pool(2) as pool:
        s = pool.map(score, data["cases"])
    print(json.dumps({"evaluator": "pool_scorer", "score": sum(s) / len(s)}))
