// Package refgraph keeps, per stream, the names each accepted resource refers to (routes to clusters, listeners to route configurations and clusters, clusters to endpoints and secrets) and finds the references that dangle: pure logic, time passed in.
package refgraph
