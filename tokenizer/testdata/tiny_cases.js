// Writes tiny_cases.json: Hugging Face's encodings of the tiny tokenizers
// that added_test.go builds (GPT-2's split and add_prefix_space; added tokens
// with lstrip, rstrip, single_word and normalized), for TestTinyCases:
//   npm install tokenizers@0.23.2
//   LUMSEARCH_WRITE_TINY=/tmp/tinytok go test ./tokenizer -run WriteTiny
//   node tiny_cases.js /tmp/tinytok > tiny_cases.json
const { Tokenizer } = require('tokenizers');
const dir = process.argv[2];
// Texts where each flag changes the result: spaces and words on either side
// of every token, tokens next to each other, and (for single_word) marks,
// digits, "_", "²" and joiners beside the word, which decide what is a word.
const texts = [
  "", " ", "the world", " the world", "  the   world  ", "the's 12 1212 ab'sx", "a\tb\n\nc  \u00a0d",
  "hello<|end|>world", " <|end|> ", "x <ls> y", "x  \t<ls>y", "<ls>", "  <ls>", "x <rs>  y", "x<rs>\n\ny", "<rs>  ",
  "a  <lsrs>  b", "<rs>  <ls>", "<rs> <lsrs> <ls>", "<lsrs><lsrs>", "x\u3000<ls>\u2028y",
  "si", " si ", "xsi", "six", "x si y", "_si", "si_", "1si", "si2", "²si", "si½", "e\u0301si", "si\u0301", "\u200dsi",
  "(si)", "si.si", "sisi", "<si>", "a<si>b", "a <si> b", "<si><si>",
  "no", " no", "a no b", "ano", "noa", "nono", "<no>", "a<no>b", "a <no> b", "x nolsrs y", "x  nolsrs  y", "lsno", " lsno", "a   lsno",
  "no <|end|> no", "<rs> no", "the<ls>world<rs> the", "<rs>\t\t x", "<rs> \t x", "<lsrs>\t\t<ls>", "a \t<ls>",
];
(async () => {
  const out = [];
  for (const name of ['gpt2', 'gpt2_prefix', 'llama2']) {
    const tok = Tokenizer.fromFile(`${dir}/${name}.json`);
    for (const text of texts) {
      const e = await tok.encode(text, null, { addSpecialTokens: false });
      out.push({ tokenizer: name, text, ids: e.getIds(), tokens: e.getTokens() });
    }
  }
  console.log('[\n' + out.map(x => JSON.stringify(x)).join(',\n') + '\n]');
})().catch(e => { console.error(e); process.exit(1); });
