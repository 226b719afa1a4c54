package loop

// B refers back up to A: the two files are one loop.
type B struct{ a *A }

// G is called by A.
func (b B) G() { _ = b.a }
