// Command etcd wraps etcdmain so that the test tools module can build the etcd
// server offline from the Go module proxy.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
