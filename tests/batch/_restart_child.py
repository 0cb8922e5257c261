"""Child process for the restart test: submit a batch job, print its id, then poll until killed."""

import json
import sys

from llmroute import Client

cfg = json.loads(open(sys.argv[1]).read())
with Client(cfg) as client:
    job = client.batches.create([{"custom_id": f"r{i}", "messages": [{"role": "user", "content": f"item {i}"}]}
                                 for i in range(int(sys.argv[2]))], model=sys.argv[3])
    print(job.id, flush=True)
    client.batches.wait(job.id)
    print("finished", flush=True)  # the test kills this process first
