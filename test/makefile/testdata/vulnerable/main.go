// Command vulnerable calls language.Parse of golang.org/x/text v0.3.6, which
// GO-2021-0113 reports.
package main

import (
	"fmt"
	"os"

	"golang.org/x/text/language"
)

func main() {
	tag, err := language.Parse(os.Args[1])
	fmt.Println(tag, err)
}
