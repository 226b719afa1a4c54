// Package export is what every output shares: the Output shape, the log's way out (LogWriter, Pretty) and the words people read; each output is a package under it.
package export
