package webui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the page at "/" and its assets under "/ui/".
func Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(sub)
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", files))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	return mux
}
