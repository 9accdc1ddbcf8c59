// Package webui is the web UI of a running app: one page that draws the
// flow graph (flowlets as nodes in topological columns, queues as edges) as
// SVG with live rates, backlog and errors, scale and pause controls, and the
// dead letters. It polls the JSON API of package httpapi; the assets are
// embedded and nothing is fetched from anywhere else.
package webui
