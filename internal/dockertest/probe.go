package dockertest

import (
	"crypto/sha256"
	"encoding/hex"
	"runtime"
	"sync"
	"testing"

	"github.com/moby/moby/client"
)

// What the probe prints, for tests to wait on and parse.
const (
	// ProbeListening is printed once probe listen accepts connections.
	ProbeListening = "listening"
	// ProbeGreeting is the line probe listen writes to every connection.
	ProbeGreeting = "hello from the probe"
	// ProbeForked starts the line probe fork prints when it is done:
	// "forked K of N", then the first error that stopped a fork.
	ProbeForked = "forked"
)

const probeSource = `package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// The probe of the network and limit tests.
//   listen PORT: accept TCP connections on PORT and write a greeting line
//     to each, until SIGTERM.
//   dial ADDR TIMEOUT: connect to ADDR within TIMEOUT and print the line it
//     reads; exit 0 when it did, 1 when not.
//   fork N: start N children that sleep, print how many started and why
//     the rest did not, then wait for SIGTERM.
func main() {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, syscall.SIGINT)
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: probe listen PORT | dial ADDR TIMEOUT | fork N | child")
		os.Exit(64)
	}
	switch os.Args[1] {
	case "child":
		for {
			time.Sleep(time.Hour)
		}
	case "listen":
		ln, err := net.Listen("tcp", ":"+os.Args[2])
		if err != nil {
			fmt.Println("listen:", err)
			os.Exit(1)
		}
		fmt.Println("` + ProbeListening + `", ln.Addr())
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				fmt.Fprintln(c, "` + ProbeGreeting + `")
				c.Close()
			}
		}()
		<-term
		os.Exit(3)
	case "dial":
		d, err := time.ParseDuration(os.Args[3])
		if err != nil {
			fmt.Println("dial: timeout:", err)
			os.Exit(64)
		}
		c, err := net.DialTimeout("tcp", os.Args[2], d)
		if err != nil {
			fmt.Println("dial failed:", err)
			os.Exit(1)
		}
		_ = c.SetReadDeadline(time.Now().Add(d))
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			fmt.Println("dial failed: read:", err)
			os.Exit(1)
		}
		fmt.Print("dial ok: ", line)
		os.Exit(0)
	case "fork":
		n, err := strconv.Atoi(os.Args[2])
		if err != nil {
			os.Exit(64)
		}
		started, first := 0, ""
		for i := 0; i < n; i++ {
			cmd := exec.Command("/proc/self/exe", "child")
			// One thread of the Go runtime less per child.
			cmd.Env = []string{"GOMAXPROCS=1"}
			if err := cmd.Start(); err != nil {
				if first == "" {
					first = err.Error()
				}
				continue
			}
			started++
		}
		fmt.Printf("` + ProbeForked + ` %d of %d: %s\n", started, n, first)
		<-term
		os.Exit(3)
	}
	fmt.Fprintln(os.Stderr, "unknown command", os.Args[1])
	os.Exit(64)
}
`

const probeDockerfile = "FROM scratch\nCOPY probe /probe\nENTRYPOINT [\"/probe\"]\n"

// probeImage is the probe image's tag, named for its source as the
// sleeper's is.
var probeImage = func() string {
	sum := sha256.Sum256([]byte(probeSource + probeDockerfile + runtime.GOARCH))
	return "gpumeter-test-probe:" + hex.EncodeToString(sum[:6])
}()

var probeBuilt struct {
	once sync.Once
	err  error
}

// ProbeImage builds the probe image once per test binary, unless the
// engine has it from the same source, and returns its tag: FROM scratch
// with a static Go binary whose commands listen on a port, dial an
// address, or fork children until a limit stops them.
func ProbeImage(t testing.TB, cli *client.Client) string {
	t.Helper()
	probeBuilt.once.Do(func() { probeBuilt.err = buildGoImage(cli, probeImage, "probe", probeSource, probeDockerfile) })
	if probeBuilt.err != nil {
		t.Fatalf("build %s: %v", probeImage, probeBuilt.err)
	}
	return probeImage
}
