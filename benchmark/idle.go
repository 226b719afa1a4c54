package benchmark

import "time"

// A middle is idle once its CPU time has not moved for idleQuiet; a window
// waits at most idleBound for that.
const (
	idleQuiet = 100 * time.Millisecond
	idleBound = 5 * time.Second
	idlePoll  = 10 * time.Millisecond
)

// waitIdle waits, within idleBound, for process pid to stop using the CPU,
// and says how much it used meanwhile. A window opens on a middle that is
// done with what came before it: the tap observes on goroutines of its own,
// so when a warm-up push has been relayed and answered, its observation (a
// first push of 10,000 clusters scanned for references, say) may still be
// running, and a window opened at once would bill it to the pushes the
// window times. The relays have nothing left to do and wait for nothing.
// The wait reads /proc/PID/stat, whose CPU times move by clock ticks (10 ms).
func waitIdle(pid int) (time.Duration, error) {
	first, err := processUsage(pid)
	if err != nil {
		return 0, err
	}
	last, quietSince := first.CPU, time.Now()
	for deadline := time.Now().Add(idleBound); time.Now().Before(deadline); {
		time.Sleep(idlePoll)
		u, err := processUsage(pid)
		if err != nil {
			return 0, err
		}
		if u.CPU != last {
			last, quietSince = u.CPU, time.Now()
			continue
		}
		if time.Since(quietSince) >= idleQuiet {
			break
		}
	}
	return last - first.CPU, nil
}
