package codec

// WholeType reports whether every SotW response of typeURL carries the whole
// set of the type, whatever the client asked for: the xDS protocol says so of
// listeners and clusters, so a listener or cluster a response lacks is gone.
func WholeType(typeURL string) bool {
	return typeURL == TypeListener || typeURL == TypeCluster
}

// Replaces reports whether a push replaces everything the client holds of its
// type, so that a resource it lacks is removed: a SotW response of a type
// that always comes whole (WholeType), of a type the client subscribed to
// with a wildcard, or of a type it never asked for (nothing to choose
// among). A Delta push never does: it removes by name (removed_resources).
//
// The tracker, the reference graph, the retained configuration and inspect
// all ask this one function, so they agree on what an accepted push left.
func Replaces(delta bool, typeURL string, wildcard, requested bool) bool {
	return !delta && (WholeType(typeURL) || wildcard || !requested)
}
