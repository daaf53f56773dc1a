module github.com/uroce/uroce

go 1.26
