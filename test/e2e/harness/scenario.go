package harness

import "time"

// SoloScenario is one container alone on GPU 0 at 50 % for a day: every
// metered GPU-second is allocated to it, half of it used.
const SoloScenario = `version: 1
node: crash-1
duration: 24h
gpus:
  - count: 1
    model: NVIDIA H100 80GB HBM3
    memory: 80GiB
    idle_power: 100W
    max_power: 500W
containers:
  - name: solo
    image: pytorch/pytorch:2.4.0-cuda12.1
    labels: {gpumeter.user: alice, gpumeter.team: nlp}
    gpus: [0]
    phases:
      - at: 0s
        util: 50
        memory: 10GiB
`

// The sampling and ledger flush intervals that the tests of the ledger
// run agents with: short, so that a test sees many of each.
const (
	FlushInterval  = time.Second
	SampleInterval = 100 * time.Millisecond
)
