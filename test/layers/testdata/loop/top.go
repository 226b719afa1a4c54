package loop

// Top calls down into the loop below it.
func Top() { A{}.F() }
