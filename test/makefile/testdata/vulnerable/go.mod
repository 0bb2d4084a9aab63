// A program that calls a function with a known vulnerability (GO-2021-0113, in
// golang.org/x/text before v0.3.7): make vulncheck must fail on it.
module example.com/vulnerable

go 1.26.0

require golang.org/x/text v0.3.6
