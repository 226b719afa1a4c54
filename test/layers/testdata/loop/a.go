package loop

// A calls B.
type A struct{}

// F uses B.
func (A) F() { B{}.G() }
