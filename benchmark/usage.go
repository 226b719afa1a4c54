package benchmark

import (
	"time"
)

// Usage is what a process has used: CPU time since it started, and its
// resident memory now and at its peak (since the last ResetPeak).
type Usage struct {
	CPU        time.Duration `json:"cpu_ns"`   // user + system
	RSS        int64         `json:"rss"`      // bytes resident now (VmRSS)
	PeakRSS    int64         `json:"peak_rss"` // bytes, high-water mark (VmHWM)
	HeapInuse  int64         `json:"heap"`     // Go heap objects, bytes
	Stacks     int64         `json:"stacks"`   // goroutine stacks, bytes
	Goroutines int           `json:"goroutines"`
	FDs        int           `json:"fds"` // open file descriptors
	// MinorFaults counts the pages the process touched for the first time
	// since the OS gave them (or gave them again after it took them back):
	// memory a fan-out takes fresh rather than reuses.
	MinorFaults int64 `json:"minflt"`
	// Syscalls counts the read and write system calls the process made
	// (/proc/PID/io's syscr and syscw), and ContextSwitches the times its
	// threads gave up or were taken off a core: on a virtual machine where
	// each costs an exit to the hypervisor, where a middle's CPU goes
	// beyond its own code.
	Syscalls        int64 `json:"syscalls"`
	ContextSwitches int64 `json:"ctxsw"`
	// GCs counts the collections the process has finished, and GCCPU the
	// CPU time they took (the runtime's estimate, background workers and
	// assists): what a latency tail may have met.
	GCs   int64         `json:"gcs"`
	GCCPU time.Duration `json:"gc_cpu_ns"`
	// Allocated counts the bytes the process has allocated on its heap, and
	// LiveHeap is the heap the last collection found live.
	Allocated int64 `json:"allocated"`
	LiveHeap  int64 `json:"live_heap"`
	// What a full tap's observation produced, to show it was on.
	Spans    int64 `json:"spans"`
	LogBytes int64 `json:"log_bytes"`
	// What a tap lost, read at a window's end: pushes not kept for their
	// answer (adstap_nack_not_kept_total), frames the reference check's
	// queue dropped (adstap_output_dropped_total{output="references"}),
	// and streams whose references it stopped checking (its log's lines
	// saying so; no metric counts them).
	NACKNotKept int64 `json:"nack_not_kept"`
	RefsDropped int64 `json:"refs_dropped"`
	RefsStopped int64 `json:"refs_stopped"`
}

// Window is what a middle process used during a measured window.
type Window struct {
	CPU     time.Duration // CPU time spent in the window
	PeakRSS int64         // highest resident memory during the window
	End     Usage         // the process at the window's end
	Start   Usage         // the process at the window's start
	// Others is the CPU time the rest of the machine (neither the load
	// generator nor the middle) used during the window, over Elapsed: on a
	// shared machine, what may have disturbed the measurement.
	Others, Elapsed time.Duration
}

// window subtracts the usage at the start of a window from the one at its end.
func window(start, end Usage) Window {
	return Window{CPU: end.CPU - start.CPU, PeakRSS: end.PeakRSS, Start: start, End: end}
}

// othersShare is the share of a core the rest of the machine used during the window.
func (w Window) othersShare() float64 {
	if w.Elapsed <= 0 {
		return 0
	}
	return float64(w.Others) / float64(w.Elapsed)
}
