package sandbox

// TermSize is the size of a terminal in characters.
type TermSize struct{ Width, Height uint16 }
