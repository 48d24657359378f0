package tokenizer_test

import (
	"fmt"
	"log"

	"github.com/lumsearch/lumsearch/tokenizer"
)

// Encode a prompt, then decode a model's output as it streams.
func Example() {
	tk, err := tokenizer.Load("../../shared/data/tokenizers/llama3")
	if err != nil {
		log.Fatal(err)
	}
	ids, err := tk.Encode("Hello, world!", true)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ids) // [9906 11 1917 0]

	stream := tk.NewStreamDecoder(true)
	for _, id := range ids { // in a server: each id as the model samples it
		text, err := stream.Add(id)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(text)
	}
	fmt.Println(stream.Flush())
}
