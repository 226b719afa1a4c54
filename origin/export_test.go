package origin

import "github.com/adstap/adstap/track"

// MaxChanged is the most objects a Stamped names.
const MaxChanged = maxChanged

// Changed reads one push with a Scanner of its own.
func Changed(c *track.Changed) Stamped { return new(Scanner).Changed(c) }
