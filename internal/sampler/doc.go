// Package sampler reads the GPU source and the container inventory on a
// clock, resolves every GPU process to its owner and hands the result to the
// meter. It keeps the latest Tick for sinks, which never wait on a source.
package sampler
