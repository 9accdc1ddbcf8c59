// Command broken does not compile: the build error must reach the user.
package main

func main() {
	undefinedFunction()
}
