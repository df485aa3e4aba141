package fulfill
