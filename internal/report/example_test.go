package report

import (
	"fmt"
	"os"

	"github.com/gpumeter/gpumeter/internal/cost"
)

// The fixture by team with the idle pool shared evenly: vision and carol's
// host process, (none), used GPUs, so each takes half of the idle H100
// hour, 1.50. Unattributed use takes no share. Efficiency is used / held:
// carol's host process held no GPU, so (none) has none.
func ExampleReport_WriteTable() {
	usage, gpus := fixture()
	r, err := Build(usage, gpus, Options{By: ByTeam, From: from, To: to, Cost: cost.Model{
		GPUHour: map[string]float64{a100: 2, cost.DefaultPrice: 3}, Idle: cost.IdleEven,
	}})
	if err != nil {
		fmt.Println(err)
		return
	}
	r.WriteTable(os.Stdout)
	// Output:
	// TEAM            ALLOC GPU-H  HELD GPU-H  PRESENT GPU-H  USED GPU-H  EFF    ENERGY kWh  PEAK MEM   PEAK UTIL  CPU CORE-H  RAM GiB-H  CONTAINERS  IDLE SHARE  COST USD
	// vision          3.00         3.00        2.50           1.10        36.7%  0.600       40.00 GiB  95%        9.00        40.00      2           1.50        8.50
	// (none)          0.00         0.00        0.50           0.25        -      0.050       2.00 GiB   60%        0.00        0.00       0           1.50        1.50
	// (unattributed)  0.00         0.00        0.00           0.05        -      0.010       0.00 GiB   10%        0.00        0.00       0           0.00        0.00
	// TOTAL           3.00         3.00        3.00           1.40        36.7%  0.660       40.00 GiB  95%        9.00        40.00      2           3.00        10.00
	// (idle)          1.00         -           -              -           -      0.090       -          -          -           -          -           -           (shared 3.00)
	// HOST            4.00         -           -              -           -      0.750       -          -          -           -          -           -           10.00
}
