# Score cases from worker threads with a queue and a lock.
import json, queue, sys, threading

data = json.load(sys.stdin)
q, lock, total = queue.Queue(), threading.Lock(), [0]
for c in data["cases"]:
    q.put(c)

def worker():
    while True:
        try:
            c = q.get_nowait()
        except queue.Empty:
            return
        if c["answer"].strip().lower() == c["expected"].strip().lower():
            with lock:
                total[0] += 1

ts = [threading.Thread(target=worker) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print(json.dumps({"evaluator": "threaded_scorer", "score": total[0] / len(data["cases"])}))
